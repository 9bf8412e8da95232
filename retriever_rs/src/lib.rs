//! Draftscope's retrieval core: a datastore of token ids indexed by a suffix array, searched
//! for the longest suffix of a context, and turned into a draft tree of likely continuations.
//!
//! - [`format`]: the index file header and section layout
//! - [`sa`]: suffix-array construction (libsais)
//! - [`writer`]: building an index file atomically
//! - [`index`]: opening (reading into memory or mapping) and validating an index
//! - [`search`]: longest-suffix search, frequency trie, draft-tree selection
//! - [`rest`]: REST's five draft buffers for a tree (the DraftRetriever-compatible face)
//!
//! The Python bindings live in `python.rs` behind the `python` cargo feature, so the core
//! builds and tests with plain `cargo test`.

pub mod error;
pub mod format;
pub mod index;
pub mod sa;
pub mod rest;
pub mod search;
pub mod writer;

#[cfg(feature = "python")]
mod python;

pub use error::{IndexError, Result};
pub use index::{DiskState, Index, Residency, IN_MEMORY_LIMIT};
pub use search::{DraftTree, SearchParams};
pub use writer::{BuildStats, IndexWriter, WriterOptions};

use rayon::prelude::*;

impl Index {
    /// Search one context (token ids) for a draft tree.
    pub fn search(&self, context: &[u32], params: &SearchParams) -> Result<DraftTree> {
        self.check_context(context)?;
        params.validate()?;
        self.ensure_readable()?;
        self.with_corpus(search::Search { context, params })
    }

    /// Search many contexts in parallel on rayon's pool.
    pub fn search_batch(&self, contexts: &[Vec<u32>], params: &SearchParams) -> Result<Vec<DraftTree>> {
        params.validate()?;
        contexts.par_iter().map(|c| self.search(c, params)).collect()
    }

    fn check_context(&self, context: &[u32]) -> Result<()> {
        let vocab = self.header().vocab_size;
        match context.iter().position(|&t| t >= vocab) {
            Some(position) => Err(IndexError::ContextTokenOutOfRange { context: None, position, value: context[position] as i64, vocab_size: vocab }),
            None => Ok(()),
        }
    }
}
