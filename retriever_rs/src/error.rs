//! Errors of the index core. Each variant names the problem in words a user can act on;
//! the Python layer maps them onto ValueError / FileNotFoundError / IndexFormatError.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("index file not found: {0}")]
    NotFound(PathBuf),

    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The file is not a Draftscope index at all (wrong magic).
    #[error("{path} is not a Draftscope index file (bad magic bytes)")]
    Foreign { path: PathBuf },

    /// Written by a newer Draftscope: refused rather than misread.
    #[error("{path} uses index format version {found}, this Draftscope reads up to version {supported}; upgrade Draftscope or rebuild the datastore")]
    NewerVersion { path: PathBuf, found: u32, supported: u32 },

    /// The file is shorter than its header says (an interrupted copy, a full disk).
    #[error("{path} is truncated: header expects {expected} bytes, file has {found}")]
    Truncated { path: PathBuf, expected: u64, found: u64 },

    /// Header checksum mismatch or inconsistent fields.
    #[error("{path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },

    /// Found while searching: the body does not agree with the header (a flipped byte).
    /// The file was written while open (copied over, truncated): a mapped index refuses to read it.
    #[error("{path} was changed on disk while it was open (copied over or truncated); open it again")]
    ChangedOnDisk { path: PathBuf },

    #[error("index data is corrupt: {0}")]
    CorruptData(String),

    #[error("entry {entry}: token at position {position} is {value}, outside the vocabulary [0, {vocab_size})")]
    TokenOutOfRange { entry: u64, position: usize, value: i64, vocab_size: u32 },

    #[error("context{}: token at position {position} is {value}, outside the vocabulary [0, {vocab_size})", .context.map(|i| format!(" {i}")).unwrap_or_default())]
    ContextTokenOutOfRange { context: Option<usize>, position: usize, value: i64, vocab_size: u32 },

    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    #[error("index build was cancelled")]
    Cancelled,

    #[error("the writer was already finalized")]
    AlreadyFinalized,

    #[error("suffix array construction failed: {0}")]
    Sais(String),
}

pub type Result<T> = std::result::Result<T, IndexError>;

impl IndexError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        let path = path.into();
        if source.kind() == std::io::ErrorKind::NotFound {
            IndexError::NotFound(path)
        } else {
            IndexError::Io { path, source }
        }
    }
}
