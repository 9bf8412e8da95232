//! Opening an index file: memory-map it, validate the header, view the sections as slices.
//! Open cost is a header read and an mmap call, whatever the size of the file.

use crate::error::{IndexError, Result};
use crate::format::{Header, Layout, HEADER_LEN};
use memmap2::Mmap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

#[cfg(target_endian = "big")]
compile_error!("the index format is little-endian and is viewed in place; big-endian hosts are not supported");

/// Hint the CPU to start loading `ptr`'s cache line; reading many random places of a large
/// memory map is bound by memory latency, and issuing the loads together overlaps them.
#[inline(always)]
pub fn prefetch<T>(items: &[T], i: usize) {
    #[cfg(target_arch = "x86_64")]
    if i < items.len() {
        // SAFETY: the pointer is in bounds; prefetching has no architectural effect.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(items.as_ptr().add(i) as *const i8)
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (items, i);
}

/// Token storage of one width.
pub trait Symbols: Sync {
    fn len(&self) -> usize;
    fn at(&self, i: usize) -> u32;
    fn prefetch(&self, i: usize);
}

macro_rules! impl_storage {
    ($trait:ident, $out:ty, $($t:ty),*) => {$(
        impl $trait for [$t] {
            #[inline]
            fn len(&self) -> usize {
                <[$t]>::len(self)
            }
            #[inline]
            fn at(&self, i: usize) -> $out {
                self[i] as $out
            }
            #[inline]
            fn prefetch(&self, i: usize) {
                prefetch(self, i)
            }
        }
    )*};
}

impl_storage!(Symbols, u32, u16, u32);

/// Suffix-array storage of one width.
pub trait Positions: Sync {
    fn len(&self) -> usize;
    fn at(&self, i: usize) -> u64;
    fn prefetch(&self, i: usize);
}

impl_storage!(Positions, u64, u32, u64);

/// The three sections of an index, typed.
pub struct Corpus<'a, T: Symbols + ?Sized, S: Positions + ?Sized> {
    pub tokens: &'a T,
    /// doc_count + 1 values: the start of every document, then the token count.
    pub doc_starts: &'a [u64],
    /// Bit p set when token p is the last of its document.
    pub doc_end_bits: &'a [u64],
    pub suffixes: &'a S,
}

impl<T: Symbols + ?Sized, S: Positions + ?Sized> Corpus<'_, T, S> {
    /// Whether token `pos` is the last of its document (positions past the end count as ends).
    #[inline]
    pub fn is_doc_last(&self, pos: u64) -> bool {
        match self.doc_end_bits.get((pos / 64) as usize) {
            Some(word) => word >> (pos % 64) & 1 == 1,
            None => true,
        }
    }

    /// Start loading what reading the occurrence at token `pos` will touch.
    #[inline]
    pub fn prefetch_occurrence(&self, pos: u64) {
        self.tokens.prefetch(pos as usize);
        prefetch(self.doc_end_bits, (pos / 64) as usize);
    }

    /// Suffix-array entry `i`, checked against the token count.
    #[inline]
    pub fn suffix(&self, i: usize) -> Result<u64> {
        let p = self.suffixes.at(i);
        if p < self.tokens.len() as u64 {
            Ok(p)
        } else {
            Err(IndexError::CorruptData(format!("suffix-array entry {i} points past the end ({p})")))
        }
    }
}

pub struct Index {
    path: PathBuf,
    header: Header,
    layout: Layout,
    map: Mmap,
}

impl Index {
    pub fn open(path: &Path) -> Result<Index> {
        let mut file = File::open(path).map_err(|e| IndexError::io(path, e))?;
        let meta = file.metadata().map_err(|e| IndexError::io(path, e))?;
        if meta.is_dir() {
            return Err(IndexError::InvalidArgument(format!("{} is a directory, not an index file", path.display())));
        }
        let file_len = meta.len();
        let mut head = Vec::with_capacity(HEADER_LEN);
        (&mut file).take(HEADER_LEN as u64).read_to_end(&mut head).map_err(|e| IndexError::io(path, e))?;
        let header = Header::decode(&head, file_len, path)?;
        let layout = header.layout().expect("validated by decode");
        // SAFETY: the map is read-only; a file changed underneath by another process can give
        // wrong tokens, and every read through it is bounds-checked, so it cannot break memory safety
        // of the slices we hand out (their lengths come from the validated header and file length).
        let map = unsafe { Mmap::map(&file) }.map_err(|e| IndexError::io(path, e))?;
        if (map.len() as u64) < layout.file_len {
            return Err(IndexError::Truncated { path: path.to_owned(), expected: layout.file_len, found: map.len() as u64 });
        }
        #[cfg(unix)]
        {
            // Searches jump around the suffix array; readahead would only waste I/O.
            let _ = map.advise(memmap2::Advice::Random);
        }
        Ok(Index { path: path.to_owned(), header, layout, map })
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn section(&self, from: u64, bytes: u64) -> &[u8] {
        &self.map[from as usize..(from + bytes) as usize]
    }

    fn cast<'a, U: bytemuck::Pod>(&self, bytes: &'a [u8]) -> &'a [U] {
        // Sections start at multiples of 8 of a page-aligned map, so this cannot fail.
        bytemuck::cast_slice(bytes)
    }

    pub fn doc_starts(&self) -> &[u64] {
        let l = &self.layout;
        self.cast(self.section(l.docs_offset, (self.header.doc_count + 1) * 8))
    }

    pub fn doc_end_bits(&self) -> &[u64] {
        let l = &self.layout;
        self.cast(self.section(l.bits_offset, self.header.token_count.div_ceil(64) * 8))
    }

    fn token_bytes(&self) -> &[u8] {
        self.section(self.layout.tokens_offset, self.header.token_count * self.header.token_width as u64)
    }

    fn sa_bytes(&self) -> &[u8] {
        self.section(self.layout.sa_offset, self.header.token_count * self.header.sa_width as u64)
    }

    /// Run `f` on the typed corpus; dispatches the (token width, suffix width) pair once so the
    /// search loops are monomorphic.
    pub fn with_corpus<R>(&self, f: impl CorpusFn<R>) -> R {
        let docs = self.doc_starts();
        let bits = self.doc_end_bits();
        match (self.header.token_width, self.header.sa_width) {
            (2, 4) => f.call(&Corpus::<[u16], [u32]> { tokens: self.cast(self.token_bytes()), doc_starts: docs, doc_end_bits: bits, suffixes: self.cast(self.sa_bytes()) }),
            (2, _) => f.call(&Corpus::<[u16], [u64]> { tokens: self.cast(self.token_bytes()), doc_starts: docs, doc_end_bits: bits, suffixes: self.cast(self.sa_bytes()) }),
            (_, 4) => f.call(&Corpus::<[u32], [u32]> { tokens: self.cast(self.token_bytes()), doc_starts: docs, doc_end_bits: bits, suffixes: self.cast(self.sa_bytes()) }),
            (_, _) => f.call(&Corpus::<[u32], [u64]> { tokens: self.cast(self.token_bytes()), doc_starts: docs, doc_end_bits: bits, suffixes: self.cast(self.sa_bytes()) }),
        }
    }

    /// The tokens of document `i` (for tests, tools and the datastore inspector).
    pub fn document(&self, i: u64) -> Result<Vec<u32>> {
        if i >= self.header.doc_count {
            return Err(IndexError::InvalidArgument(format!("document {i} out of range (index holds {})", self.header.doc_count)));
        }
        let docs = self.doc_starts();
        let (a, b) = (docs[i as usize], docs[i as usize + 1]);
        if a > b || b > self.header.token_count {
            return Err(IndexError::CorruptData(format!("document {i} has bounds {a}..{b}")));
        }
        struct Slice(u64, u64);
        impl CorpusFn<Vec<u32>> for Slice {
            fn call<T: Symbols + ?Sized, S: Positions + ?Sized>(self, c: &Corpus<T, S>) -> Vec<u32> {
                (self.0..self.1).map(|p| c.tokens.at(p as usize)).collect()
            }
        }
        Ok(self.with_corpus(Slice(a, b)))
    }

    /// Full integrity check: the body checksum recorded at build time (reads the whole file).
    pub fn verify(&self) -> Result<()> {
        let body = &self.map[HEADER_LEN..self.layout.file_len as usize];
        if crc32fast::hash(body) != self.header.body_crc {
            return Err(IndexError::Corrupt { path: self.path.clone(), reason: "body checksum mismatch".into() });
        }
        Ok(())
    }
}

/// A computation generic over the corpus' storage widths (a generic closure, spelled out).
pub trait CorpusFn<R> {
    fn call<T: Symbols + ?Sized, S: Positions + ?Sized>(self, corpus: &Corpus<T, S>) -> R;
}
