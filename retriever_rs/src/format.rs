//! The on-disk header of an index file and the layout of its sections.
//!
//! ```text
//! offset  size  field
//!   0      8    magic  b"DSCPIDX\0"
//!   8      4    format version (u32)
//!  12      4    header length (u32, = HEADER_LEN)
//!  16      1    token width in bytes (2 or 4)
//!  17      1    suffix-array entry width in bytes (4 or 8)
//!  18      2    reserved (0)
//!  20      4    vocab size (u32)
//!  24      8    document count (u64)
//!  32      8    token count (u64)
//!  40      8    tokens offset
//!  48      8    document-starts offset (doc_count + 1 u64 values; the last is token count)
//!  56      8    suffix-array offset
//!  64      8    file length
//!  72      4    body CRC-32 (everything after the header; checked by `verify`, not on open)
//!  76      4    fingerprint length
//!  80    128    tokenizer fingerprint (UTF-8, zero padded)
//! 208      8    document-end bitmap offset (ceil(tokens / 64) u64 words; bit p = token p
//!               is the last of its document), so a search finds a boundary in one cache line
//! 216     36    reserved (0)
//! 252      4    header CRC-32 over bytes 0..252
//! ```
//! All integers little-endian; every section starts at a multiple of 8 so the memory map can be
//! viewed as typed slices without copying.

use crate::error::{IndexError, Result};
use std::path::Path;

pub const MAGIC: [u8; 8] = *b"DSCPIDX\0";
pub const FORMAT_VERSION: u32 = 1;
pub const HEADER_LEN: usize = 256;
pub const MAX_FINGERPRINT_LEN: usize = 128;
/// Largest vocabulary: token + 1 must fit the i32 text handed to libsais.
pub const MAX_VOCAB_SIZE: u32 = (i32::MAX - 1) as u32;
/// Vocabularies up to this size are stored as u16.
pub const U16_VOCAB_LIMIT: u32 = 65_536;

const HEADER_CRC_AT: usize = HEADER_LEN - 4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub version: u32,
    pub token_width: u8,
    pub sa_width: u8,
    pub vocab_size: u32,
    pub doc_count: u64,
    pub token_count: u64,
    pub body_crc: u32,
    pub fingerprint: String,
}

/// Byte offsets of the three sections, derived from the counts and widths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub tokens_offset: u64,
    pub docs_offset: u64,
    pub bits_offset: u64,
    pub sa_offset: u64,
    pub file_len: u64,
}

pub fn align8(x: u64) -> u64 {
    x.div_ceil(8) * 8
}

pub fn token_width_for(vocab_size: u32) -> u8 {
    if vocab_size <= U16_VOCAB_LIMIT {
        2
    } else {
        4
    }
}

pub fn sa_width_for(token_count: u64) -> u8 {
    if token_count <= u32::MAX as u64 {
        4
    } else {
        8
    }
}

impl Header {
    pub fn new(vocab_size: u32, doc_count: u64, token_count: u64, fingerprint: &str) -> Header {
        Header {
            version: FORMAT_VERSION,
            token_width: token_width_for(vocab_size),
            sa_width: sa_width_for(token_count),
            vocab_size,
            doc_count,
            token_count,
            body_crc: 0,
            fingerprint: fingerprint.to_owned(),
        }
    }

    /// Section offsets; None when the counts overflow (only possible in a corrupt header).
    pub fn layout(&self) -> Option<Layout> {
        let tokens_offset = HEADER_LEN as u64;
        let tokens_bytes = self.token_count.checked_mul(self.token_width as u64)?;
        let docs_offset = align8(tokens_offset.checked_add(tokens_bytes)?);
        let docs_bytes = self.doc_count.checked_add(1)?.checked_mul(8)?;
        let bits_offset = docs_offset.checked_add(docs_bytes)?;
        let bits_bytes = self.token_count.div_ceil(64).checked_mul(8)?;
        let sa_offset = bits_offset.checked_add(bits_bytes)?;
        let sa_bytes = self.token_count.checked_mul(self.sa_width as u64)?;
        let file_len = sa_offset.checked_add(sa_bytes)?;
        Some(Layout { tokens_offset, docs_offset, bits_offset, sa_offset, file_len })
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let layout = self.layout().expect("layout of a header we built ourselves");
        let mut b = [0u8; HEADER_LEN];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        b[16] = self.token_width;
        b[17] = self.sa_width;
        b[20..24].copy_from_slice(&self.vocab_size.to_le_bytes());
        b[24..32].copy_from_slice(&self.doc_count.to_le_bytes());
        b[32..40].copy_from_slice(&self.token_count.to_le_bytes());
        b[40..48].copy_from_slice(&layout.tokens_offset.to_le_bytes());
        b[48..56].copy_from_slice(&layout.docs_offset.to_le_bytes());
        b[56..64].copy_from_slice(&layout.sa_offset.to_le_bytes());
        b[64..72].copy_from_slice(&layout.file_len.to_le_bytes());
        b[72..76].copy_from_slice(&self.body_crc.to_le_bytes());
        let fp = self.fingerprint.as_bytes();
        b[76..80].copy_from_slice(&(fp.len() as u32).to_le_bytes());
        b[80..80 + fp.len()].copy_from_slice(fp);
        b[208..216].copy_from_slice(&layout.bits_offset.to_le_bytes());
        let crc = crc32fast::hash(&b[..HEADER_CRC_AT]);
        b[HEADER_CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parse and validate a header against the real file length. Checks, in order: magic
    /// (foreign file), version (newer file), checksum (corrupt), fields, length (truncated).
    pub fn decode(bytes: &[u8], actual_file_len: u64, path: &Path) -> Result<Header> {
        let corrupt = |reason: &str| IndexError::Corrupt { path: path.to_owned(), reason: reason.to_owned() };
        if bytes.len() < MAGIC.len() || bytes[..MAGIC.len()] != MAGIC {
            return Err(IndexError::Foreign { path: path.to_owned() });
        }
        if bytes.len() < HEADER_LEN {
            return Err(IndexError::Truncated {
                path: path.to_owned(),
                expected: HEADER_LEN as u64,
                found: actual_file_len,
            });
        }
        let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap());

        let version = u32_at(8);
        let stored_crc = u32_at(HEADER_CRC_AT);
        let crc_ok = crc32fast::hash(&bytes[..HEADER_CRC_AT]) == stored_crc;
        // A newer version may have changed the header itself, so refuse it before the checksum,
        // but only when the checksum agrees or the rest still looks like our layout would not
        // matter: an intact newer file must say "newer", a damaged one "corrupt".
        if version > FORMAT_VERSION && crc_ok {
            return Err(IndexError::NewerVersion { path: path.to_owned(), found: version, supported: FORMAT_VERSION });
        }
        if !crc_ok {
            return Err(corrupt("header checksum mismatch"));
        }
        if version == 0 {
            return Err(corrupt("format version 0"));
        }
        if u32_at(12) as usize != HEADER_LEN {
            return Err(corrupt("unexpected header length"));
        }
        let token_width = bytes[16];
        let sa_width = bytes[17];
        let vocab_size = u32_at(20);
        let doc_count = u64_at(24);
        let token_count = u64_at(32);
        let body_crc = u32_at(72);
        let fp_len = u32_at(76) as usize;
        if fp_len > MAX_FINGERPRINT_LEN {
            return Err(corrupt("fingerprint length out of range"));
        }
        let fingerprint = std::str::from_utf8(&bytes[80..80 + fp_len])
            .map_err(|_| corrupt("fingerprint is not UTF-8"))?
            .to_owned();
        if vocab_size == 0 || vocab_size > MAX_VOCAB_SIZE {
            return Err(corrupt("vocab size out of range"));
        }
        if token_width != token_width_for(vocab_size) {
            return Err(corrupt("token width does not match the vocab size"));
        }
        if sa_width != 4 && sa_width != 8 || (sa_width == 4 && token_count > u32::MAX as u64) {
            return Err(corrupt("suffix-array width does not fit the token count"));
        }
        if doc_count > token_count {
            return Err(corrupt("more documents than tokens"));
        }
        let header = Header { version, token_width, sa_width, vocab_size, doc_count, token_count, body_crc, fingerprint };
        let layout = header.layout().ok_or_else(|| corrupt("section sizes overflow"))?;
        if (u64_at(40), u64_at(48), u64_at(208), u64_at(56), u64_at(64))
            != (layout.tokens_offset, layout.docs_offset, layout.bits_offset, layout.sa_offset, layout.file_len)
        {
            return Err(corrupt("section offsets disagree with the counts"));
        }
        if actual_file_len < layout.file_len {
            return Err(IndexError::Truncated { path: path.to_owned(), expected: layout.file_len, found: actual_file_len });
        }
        if actual_file_len > layout.file_len {
            return Err(corrupt(&format!(
                "file has {} trailing bytes after the suffix array",
                actual_file_len - layout.file_len
            )));
        }
        Ok(header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Header {
        let mut h = Header::new(151_936, 3, 1234, "sha256:abc");
        h.body_crc = 0xdead_beef;
        h
    }

    #[test]
    fn header_round_trip() {
        let h = sample();
        let bytes = h.encode();
        let len = h.layout().unwrap().file_len;
        let back = Header::decode(&bytes, len, Path::new("x")).unwrap();
        assert_eq!(back, h);
        assert_eq!(back.token_width, 4);
        assert_eq!(back.sa_width, 4);
    }

    #[test]
    fn widths_follow_vocab_and_size() {
        assert_eq!(token_width_for(32_000), 2);
        assert_eq!(token_width_for(65_536), 2);
        assert_eq!(token_width_for(65_537), 4);
        assert_eq!(token_width_for(262_144), 4);
        assert_eq!(sa_width_for(u32::MAX as u64), 4);
        assert_eq!(sa_width_for(u32::MAX as u64 + 1), 8);
    }

    #[test]
    fn every_single_byte_flip_is_refused() {
        let h = sample();
        let bytes = h.encode();
        let len = h.layout().unwrap().file_len;
        for i in 0..HEADER_LEN {
            let mut b = bytes;
            b[i] ^= 0x10;
            assert!(Header::decode(&b, len, Path::new("x")).is_err(), "flip at {i} accepted");
        }
    }

    #[test]
    fn newer_version_is_named() {
        let mut h = sample();
        h.version = FORMAT_VERSION + 1;
        let bytes = h.encode();
        let err = Header::decode(&bytes, h.layout().unwrap().file_len, Path::new("x")).unwrap_err();
        assert!(matches!(err, IndexError::NewerVersion { found, .. } if found == FORMAT_VERSION + 1));
    }

    #[test]
    fn truncation_and_foreign_are_named() {
        let h = sample();
        let bytes = h.encode();
        let len = h.layout().unwrap().file_len;
        assert!(matches!(Header::decode(&bytes, len - 1, Path::new("x")), Err(IndexError::Truncated { .. })));
        assert!(matches!(Header::decode(&bytes[..100], 100, Path::new("x")), Err(IndexError::Truncated { .. })));
        assert!(matches!(Header::decode(b"PK\x03\x04 zip file", 14, Path::new("x")), Err(IndexError::Foreign { .. })));
    }
}
