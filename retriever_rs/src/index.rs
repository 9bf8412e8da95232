//! Opening an index file: validate the header, read the file into memory (or memory-map a large
//! one), view the sections as slices. A file changed on disk while open never faults the process:
//! a copy in memory does not see it, and a map is checked before each read.

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

/// Where an open index's bytes live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Residency {
    /// Read into memory when the file is at most [`IN_MEMORY_LIMIT`] bytes, else mapped.
    Auto,
    /// Read into memory: a file changed or truncated on disk afterwards cannot affect searches
    /// (REST's DraftRetriever reads its datastores into memory too).
    Memory,
    /// Memory-mapped: opening costs nothing whatever the size, but a file changed in place on
    /// disk is detected before each read and refused with [`IndexError::ChangedOnDisk`] (a
    /// truncated map would otherwise kill the process with SIGBUS).
    Mapped,
}

/// Files up to this size are read into memory by [`Residency::Auto`].
pub const IN_MEMORY_LIMIT: u64 = 1 << 30;

enum Bytes {
    Mapped(Mmap),
    /// u64 words: sections start at multiples of 8, so the typed views stay aligned.
    Owned(Vec<u64>, usize),
}

impl Bytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(words, len) => &bytemuck::cast_slice(words)[..*len],
        }
    }
}

/// What identifies the file's contents on disk: a change of any field means it was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<std::time::SystemTime>,
    inode: (u64, u64),
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        #[cfg(unix)]
        let inode = {
            use std::os::unix::fs::MetadataExt;
            (meta.dev(), meta.ino())
        };
        #[cfg(not(unix))]
        let inode = (0, 0);
        Stamp { len: meta.len(), modified: meta.modified().ok(), inode }
    }
}

/// How the file behind an open index stands now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskState {
    /// Still the file that was opened, unchanged.
    Same,
    /// The open file itself was written (copied over, truncated, appended to).
    Modified,
    /// The path now names another file (the index was rebuilt or moved there), or none.
    Replaced,
}

fn describe_kind(meta: &std::fs::Metadata) -> &'static str {
    let t = meta.file_type();
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a named pipe (FIFO)";
        }
        if t.is_socket() {
            return "a socket";
        }
        if t.is_block_device() || t.is_char_device() {
            return "a device";
        }
    }
    if t.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

fn not_regular(path: &Path, meta: &std::fs::Metadata) -> IndexError {
    IndexError::InvalidArgument(format!("{} is {}, not an index file", path.display(), describe_kind(meta)))
}

/// Open for reading without ever blocking: a FIFO swapped in after the check below would
/// otherwise wait forever for a writer.
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    options.open(path)
}

pub struct Index {
    path: PathBuf,
    header: Header,
    layout: Layout,
    bytes: Bytes,
    file: File,
    stamp: Stamp,
}

impl Index {
    pub fn open(path: &Path) -> Result<Index> {
        Index::open_with(path, Residency::Auto)
    }

    pub fn open_with(path: &Path, residency: Residency) -> Result<Index> {
        // stat first: opening a FIFO for reading blocks until a writer comes.
        let meta = std::fs::metadata(path).map_err(|e| IndexError::io(path, e))?;
        if !meta.is_file() {
            return Err(not_regular(path, &meta));
        }
        let mut file = open_nonblocking(path).map_err(|e| IndexError::io(path, e))?;
        let meta = file.metadata().map_err(|e| IndexError::io(path, e))?;
        if !meta.is_file() {
            return Err(not_regular(path, &meta));
        }
        let stamp = Stamp::of(&meta);
        let file_len = meta.len();
        let mut head = Vec::with_capacity(HEADER_LEN);
        (&mut file).take(HEADER_LEN as u64).read_to_end(&mut head).map_err(|e| IndexError::io(path, e))?;
        let header = Header::decode(&head, file_len, path)?;
        let layout = header.layout().expect("validated by decode");
        let in_memory = match residency {
            Residency::Memory => true,
            Residency::Mapped => false,
            Residency::Auto => layout.file_len <= IN_MEMORY_LIMIT,
        };
        let bytes = if in_memory { Self::read_all(&mut file, path, layout.file_len, stamp)? } else { Self::map(&file, path)? };
        if (bytes.as_slice().len() as u64) < layout.file_len {
            return Err(IndexError::Truncated { path: path.to_owned(), expected: layout.file_len, found: bytes.as_slice().len() as u64 });
        }
        Ok(Index { path: path.to_owned(), header, layout, bytes, file, stamp })
    }

    fn map(file: &File, path: &Path) -> Result<Bytes> {
        // SAFETY: the map is read-only and its length comes from the validated header and file
        // length. A file truncated underneath would fault on access (SIGBUS): every search first
        // checks the file is unchanged (`ensure_unchanged`), which narrows that to a change
        // landing during one search.
        let map = unsafe { Mmap::map(file) }.map_err(|e| IndexError::io(path, e))?;
        #[cfg(unix)]
        {
            // Searches jump around the suffix array; readahead would only waste I/O.
            let _ = map.advise(memmap2::Advice::Random);
        }
        Ok(Bytes::Mapped(map))
    }

    fn read_all(file: &mut File, path: &Path, len: u64, stamp: Stamp) -> Result<Bytes> {
        use std::io::{Seek, SeekFrom};
        let n = usize::try_from(len).map_err(|_| IndexError::InvalidArgument(format!("{} is too large to read into memory", path.display())))?;
        let mut words: Vec<u64> = Vec::new();
        words.try_reserve_exact(n.div_ceil(8)).map_err(|_| {
            IndexError::InvalidArgument(format!("not enough memory to read {} ({n} bytes); open it memory-mapped", path.display()))
        })?;
        words.resize(n.div_ceil(8), 0);
        let buf = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..n];
        file.seek(SeekFrom::Start(0)).map_err(|e| IndexError::io(path, e))?;
        file.read_exact(buf).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => IndexError::ChangedOnDisk { path: path.to_owned() },
            _ => IndexError::io(path, e),
        })?;
        // A copy landing while we read would give a mix of two files.
        let after = file.metadata().map_err(|e| IndexError::io(path, e))?;
        if Stamp::of(&after) != stamp {
            return Err(IndexError::ChangedOnDisk { path: path.to_owned() });
        }
        Ok(Bytes::Owned(words, n))
    }

    /// Whether the bytes searched are a private copy in memory (else a map of the file).
    pub fn in_memory(&self) -> bool {
        matches!(self.bytes, Bytes::Owned(..))
    }

    /// How the file on disk stands against what was opened.
    pub fn disk_state(&self) -> DiskState {
        match self.file.metadata() {
            Ok(meta) if Stamp::of(&meta) != self.stamp => return DiskState::Modified,
            Err(_) => return DiskState::Modified,
            Ok(_) => {}
        }
        match std::fs::metadata(&self.path) {
            Ok(meta) if Stamp::of(&meta) == self.stamp => DiskState::Same,
            _ => DiskState::Replaced,
        }
    }

    /// Refuse to read a mapped file that was written since it was opened (a truncated map
    /// faults). A copy in memory is always safe to read.
    pub fn ensure_readable(&self) -> Result<()> {
        if let Bytes::Mapped(_) = self.bytes {
            let same = self.file.metadata().map(|m| Stamp::of(&m) == self.stamp).unwrap_or(false);
            if !same {
                return Err(IndexError::ChangedOnDisk { path: self.path.clone() });
            }
        }
        Ok(())
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn section(&self, from: u64, bytes: u64) -> &[u8] {
        &self.bytes.as_slice()[from as usize..(from + bytes) as usize]
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
        self.ensure_readable()?;
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
        self.ensure_readable()?;
        let body = &self.bytes.as_slice()[HEADER_LEN..self.layout.file_len as usize];
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
