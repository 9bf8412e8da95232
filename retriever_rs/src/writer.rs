//! Building an index file: collect documents, sort suffixes with libsais, write atomically.

use crate::error::{IndexError, Result};
use crate::format::{self, Header, HEADER_LEN, MAX_FINGERPRINT_LEN, MAX_VOCAB_SIZE};
use crate::sa;
use std::fs::{self, File};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// What a finished build reports.
#[derive(Debug, Clone)]
pub struct BuildStats {
    pub documents: u64,
    pub tokens: u64,
    pub empty_documents_skipped: u64,
    pub file_bytes: u64,
    pub token_width: u8,
    pub sa_width: u8,
    /// Seconds inside libsais alone.
    pub sa_seconds: f64,
    /// Seconds of the whole finalize (suffix array + writing + rename).
    pub finalize_seconds: f64,
}

#[derive(Debug, Clone)]
pub struct WriterOptions {
    /// libsais threads; 0 = all cores.
    pub threads: u16,
    /// Build and store 64-bit suffix-array entries even for small texts (tests the wide path).
    pub force_wide: bool,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions { threads: 0, force_wide: false }
    }
}

pub struct IndexWriter {
    vocab_size: u32,
    fingerprint: String,
    /// token + 1 per token, 0 after every document: the libsais text itself, so the build
    /// needs no second copy of the corpus.
    text: Vec<i32>,
    documents: u64,
    entries_seen: u64,
    empty_skipped: u64,
    cancel: Arc<AtomicBool>,
    options: WriterOptions,
}

/// Removes the temporary file unless the build committed it.
struct TempFileGuard {
    path: PathBuf,
    committed: bool,
}

impl Drop for TempFileGuard {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Writes bytes through a buffer while keeping a running CRC of everything written.
struct ChecksummedWriter {
    inner: BufWriter<File>,
    crc: crc32fast::Hasher,
    written: u64,
    path: PathBuf,
}

impl ChecksummedWriter {
    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.crc.update(bytes);
        self.written += bytes.len() as u64;
        self.inner.write_all(bytes).map_err(|e| IndexError::io(&self.path, e))
    }

    fn pad_to_8(&mut self) -> Result<()> {
        let pad = (format::align8(self.written) - self.written) as usize;
        self.write(&[0u8; 8][..pad])
    }
}

const CHUNK: usize = 1 << 16;

impl IndexWriter {
    pub fn new(vocab_size: u32, fingerprint: &str, options: WriterOptions) -> Result<Self> {
        if vocab_size == 0 || vocab_size > MAX_VOCAB_SIZE {
            return Err(IndexError::InvalidArgument(format!(
                "vocab_size must be in [1, {MAX_VOCAB_SIZE}], got {vocab_size}"
            )));
        }
        if fingerprint.len() > MAX_FINGERPRINT_LEN {
            return Err(IndexError::InvalidArgument(format!(
                "tokenizer fingerprint is {} bytes, at most {MAX_FINGERPRINT_LEN} allowed",
                fingerprint.len()
            )));
        }
        Ok(IndexWriter {
            vocab_size,
            fingerprint: fingerprint.to_owned(),
            text: Vec::new(),
            documents: 0,
            entries_seen: 0,
            empty_skipped: 0,
            cancel: Arc::new(AtomicBool::new(false)),
            options,
        })
    }

    pub fn vocab_size(&self) -> u32 {
        self.vocab_size
    }

    pub fn documents(&self) -> u64 {
        self.documents
    }

    pub fn tokens(&self) -> u64 {
        self.text.len() as u64 - self.documents
    }

    /// A flag another thread may set to stop `finalize` at its next check.
    pub fn cancel_handle(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.cancel)
    }

    /// Add one document. The whole entry is validated first: a bad token adds nothing.
    pub fn add_document<T: Copy + Into<i64>>(&mut self, tokens: &[T]) -> Result<()> {
        self.add_numbered_document(tokens, self.entries_seen)
    }

    /// `add_document` for a caller that numbers entries itself (so errors name its numbering).
    pub fn add_numbered_document<T: Copy + Into<i64>>(&mut self, tokens: &[T], entry: u64) -> Result<()> {
        self.entries_seen += 1;
        if let Some((position, &bad)) =
            tokens.iter().enumerate().find(|(_, &t)| !(0..self.vocab_size as i64).contains(&t.into()))
        {
            return Err(IndexError::TokenOutOfRange { entry, position, value: bad.into(), vocab_size: self.vocab_size });
        }
        if tokens.is_empty() {
            self.empty_skipped += 1;
            return Ok(());
        }
        self.text.reserve(tokens.len() + 1);
        // In range, so token + 1 <= MAX_VOCAB_SIZE fits i32.
        self.text.extend(tokens.iter().map(|&t| (t.into() + 1) as i32));
        self.text.push(0);
        self.documents += 1;
        Ok(())
    }

    fn check_cancel(&self) -> Result<()> {
        if self.cancel.load(Ordering::Relaxed) {
            Err(IndexError::Cancelled)
        } else {
            Ok(())
        }
    }

    /// Build the suffix array and write the index to `path` (via a temp file and a rename).
    pub fn finalize(mut self, path: &Path) -> Result<BuildStats> {
        let started = Instant::now();
        self.check_cancel()?;
        let n = self.tokens();
        let mut header = Header::new(self.vocab_size, self.documents, n, &self.fingerprint);
        if self.options.force_wide {
            header.sa_width = 8;
        }
        let layout = header.layout().expect("layout of a fresh header");

        let tmp_path = temp_path_for(path);
        let file = File::create(&tmp_path).map_err(|e| IndexError::io(&tmp_path, e))?;
        let mut guard = TempFileGuard { path: tmp_path.clone(), committed: false };
        let mut out = ChecksummedWriter {
            inner: BufWriter::with_capacity(1 << 20, file),
            crc: crc32fast::Hasher::new(),
            written: 0,
            path: tmp_path.clone(),
        };
        // Header placeholder; the real one (with the body checksum) goes in last.
        out.inner.write_all(&[0u8; HEADER_LEN]).map_err(|e| IndexError::io(&tmp_path, e))?;
        out.written = HEADER_LEN as u64;

        let alphabet = self.vocab_size as i64 + 1;
        let wide = self.options.force_wide || self.text.len() >= i32::MAX as usize;
        let sa_started = Instant::now();
        // Suffix array over the separator text, as i64 or i32 entries.
        let sa_narrow;
        let sa_wide;
        let mut text_wide: Vec<i64> = Vec::new();
        if wide {
            text_wide = self.text.iter().map(|&x| x as i64).collect();
            sa_wide = sa::suffix_array_i64(&mut text_wide, alphabet, self.options.threads)?;
            sa_narrow = Vec::new();
        } else {
            sa_narrow = sa::suffix_array_i32(&mut self.text, alphabet as i32, self.options.threads)?;
            sa_wide = Vec::new();
        }
        let sa_seconds = sa_started.elapsed().as_secs_f64();
        self.check_cancel()?;

        self.write_tokens(&mut out, header.token_width)?;
        out.pad_to_8()?;
        debug_assert_eq!(out.written, layout.docs_offset);
        self.write_doc_starts(&mut out)?;
        debug_assert_eq!(out.written, layout.bits_offset);
        self.write_doc_end_bits(&mut out)?;
        debug_assert_eq!(out.written, layout.sa_offset);

        // Rewrite the text in place as "position without separators" (-1 for a separator),
        // then stream the suffix array through it, dropping separator suffixes.
        let mut seps = 0i64;
        for (p, sym) in self.text.iter_mut().enumerate() {
            if *sym == 0 {
                seps += 1;
                *sym = -1;
            } else {
                *sym = (p as i64 - seps) as i32;
            }
        }
        drop(text_wide);
        let mut buf: Vec<u8> = Vec::with_capacity(CHUNK * 8);
        let cancel = Arc::clone(&self.cancel);
        let emit = |pos: i64, out: &mut ChecksummedWriter, buf: &mut Vec<u8>| -> Result<()> {
            if header.sa_width == 4 {
                buf.extend_from_slice(&(pos as u32).to_le_bytes());
            } else {
                buf.extend_from_slice(&(pos as u64).to_le_bytes());
            }
            if buf.len() >= CHUNK * 4 {
                out.write(buf)?;
                buf.clear();
                if cancel.load(Ordering::Relaxed) {
                    return Err(IndexError::Cancelled);
                }
            }
            Ok(())
        };
        if wide {
            for &s in &sa_wide {
                let pos = self.text[s as usize];
                if pos >= 0 {
                    emit(pos as i64, &mut out, &mut buf)?;
                }
            }
        } else {
            for &s in &sa_narrow {
                let pos = self.text[s as usize];
                if pos >= 0 {
                    emit(pos as i64, &mut out, &mut buf)?;
                }
            }
        }
        out.write(&buf)?;
        debug_assert_eq!(out.written, layout.file_len);

        header.body_crc = out.crc.clone().finalize();
        let mut file = out.inner.into_inner().map_err(|e| IndexError::io(&tmp_path, e.into_error()))?;
        file.seek(SeekFrom::Start(0)).map_err(|e| IndexError::io(&tmp_path, e))?;
        file.write_all(&header.encode()).map_err(|e| IndexError::io(&tmp_path, e))?;
        file.sync_all().map_err(|e| IndexError::io(&tmp_path, e))?;
        drop(file);
        self.check_cancel()?;
        fs::rename(&tmp_path, path).map_err(|e| IndexError::io(path, e))?;
        guard.committed = true;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // Make the rename itself durable; not all platforms allow opening a directory.
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(BuildStats {
            documents: self.documents,
            tokens: n,
            empty_documents_skipped: self.empty_skipped,
            file_bytes: layout.file_len,
            token_width: header.token_width,
            sa_width: header.sa_width,
            sa_seconds,
            finalize_seconds: started.elapsed().as_secs_f64(),
        })
    }

    fn write_tokens(&self, out: &mut ChecksummedWriter, width: u8) -> Result<()> {
        let mut buf: Vec<u8> = Vec::with_capacity(CHUNK * 4);
        for chunk in self.text.chunks(CHUNK) {
            buf.clear();
            for &sym in chunk.iter().filter(|&&s| s != 0) {
                let token = (sym - 1) as u32;
                if width == 2 {
                    buf.extend_from_slice(&(token as u16).to_le_bytes());
                } else {
                    buf.extend_from_slice(&token.to_le_bytes());
                }
            }
            out.write(&buf)?;
            self.check_cancel()?;
        }
        Ok(())
    }

    /// Bit p of the bitmap is set when token p is the last of its document.
    fn write_doc_end_bits(&self, out: &mut ChecksummedWriter) -> Result<()> {
        let mut words: Vec<u64> = vec![0; self.tokens().div_ceil(64) as usize];
        let mut p = 0usize;
        for &sym in &self.text {
            if sym == 0 {
                words[(p - 1) / 64] |= 1 << ((p - 1) % 64);
            } else {
                p += 1;
            }
        }
        out.write(bytemuck::cast_slice(&words))
    }

    fn write_doc_starts(&self, out: &mut ChecksummedWriter) -> Result<()> {
        let mut buf: Vec<u8> = Vec::with_capacity((self.documents as usize + 1) * 8);
        let mut tokens_so_far = 0u64;
        buf.extend_from_slice(&0u64.to_le_bytes());
        for &sym in &self.text {
            if sym == 0 {
                buf.extend_from_slice(&tokens_so_far.to_le_bytes());
            } else {
                tokens_so_far += 1;
            }
        }
        // doc_count + 1 values: every document's start, then the total token count.
        out.write(&buf)
    }
}

/// A hidden sibling of the final file, so the rename stays on one filesystem.
fn temp_path_for(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "index".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    path.with_file_name(format!(".{name}.{}.{nanos}.tmp", std::process::id()))
}
