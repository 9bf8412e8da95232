//! Thin pyo3 layer: argument conversion, GIL release, errors mapped to Python exceptions.
//! All logic lives in the core modules.

use crate::error::IndexError;
use crate::rest::rest_buffers;
use crate::{DiskState, DraftTree, Index, IndexWriter, Residency, SearchParams, WriterOptions};
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1};
use pyo3::exceptions::{PyFileNotFoundError, PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

pyo3::create_exception!(_retriever, IndexFormatError, PyValueError, "The file is not a readable Draftscope index (foreign, truncated or corrupt).");
pyo3::create_exception!(_retriever, NewerIndexVersionError, IndexFormatError, "The index was written by a newer Draftscope.");
pyo3::create_exception!(_retriever, IndexChangedError, pyo3::exceptions::PyOSError, "The index file was changed on disk while it was open; open it again.");
pyo3::create_exception!(_retriever, BuildCancelled, pyo3::exceptions::PyException, "The index build was cancelled; nothing was written.");

fn to_py(err: IndexError) -> PyErr {
    let msg = err.to_string();
    match err {
        IndexError::NotFound(_) => PyFileNotFoundError::new_err(msg),
        IndexError::Io { .. } => PyOSError::new_err(msg),
        IndexError::NewerVersion { .. } => NewerIndexVersionError::new_err(msg),
        IndexError::Foreign { .. } | IndexError::Truncated { .. } | IndexError::Corrupt { .. } | IndexError::CorruptData(_) => {
            IndexFormatError::new_err(msg)
        }
        IndexError::Cancelled => BuildCancelled::new_err(msg),
        IndexError::ChangedOnDisk { .. } => IndexChangedError::new_err(msg),
        IndexError::TokenOutOfRange { .. }
        | IndexError::ContextTokenOutOfRange { .. }
        | IndexError::InvalidArgument(_)
        | IndexError::AlreadyFinalized => PyValueError::new_err(msg),
        IndexError::Sais(_) => PyRuntimeError::new_err(msg),
    }
}

/// Run core code so that a Rust panic becomes a Python RuntimeError instead of aborting.
fn guarded<T>(f: impl FnOnce() -> crate::Result<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r.map_err(to_py),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(PyRuntimeError::new_err(format!("internal error in the retriever (please report): {what}")))
        }
    }
}

fn context_ids(context: &[i64], vocab_size: u32, which: Option<usize>) -> PyResult<Vec<u32>> {
    context
        .iter()
        .enumerate()
        .map(|(position, &t)| {
            if (0..vocab_size as i64).contains(&t) {
                Ok(t as u32)
            } else {
                Err(to_py(IndexError::ContextTokenOutOfRange { context: which, position, value: t, vocab_size }))
            }
        })
        .collect()
}

type TreeTuple<'py> = (
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i32>>,
    Bound<'py, PyArray1<i32>>,
    Bound<'py, PyArray1<f32>>,
    usize,
    u64,
    usize,
);

fn tree_to_py(py: Python<'_>, t: DraftTree) -> TreeTuple<'_> {
    (
        PyArray1::from_vec(py, t.tokens.into_iter().map(i64::from).collect()),
        PyArray1::from_vec(py, t.parents),
        PyArray1::from_vec(py, t.depth.into_iter().map(|d| d as i32).collect()),
        PyArray1::from_vec(py, t.support.into_iter().map(|s| s as f32).collect()),
        t.match_len,
        t.match_count,
        t.sampled,
    )
}

/// Builds one index file. Documents are held in memory (4 bytes a token) until `finalize`.
#[pyclass(module = "draftscope._retriever", name = "IndexWriter")]
struct IndexWriterPy {
    inner: Mutex<Option<IndexWriter>>,
    cancel: Arc<AtomicBool>,
    path: PathBuf,
    vocab_size: u32,
}

#[pymethods]
impl IndexWriterPy {
    #[new]
    #[pyo3(signature = (path, vocab_size, tokenizer_fingerprint = "", threads = 0, force_wide = false))]
    fn new(path: PathBuf, vocab_size: i64, tokenizer_fingerprint: &str, threads: u16, force_wide: bool) -> PyResult<Self> {
        let vocab = u32::try_from(vocab_size)
            .map_err(|_| PyValueError::new_err(format!("vocab_size must be a positive 32-bit count, got {vocab_size}")))?;
        let writer = guarded(|| IndexWriter::new(vocab, tokenizer_fingerprint, WriterOptions { threads, force_wide }))?;
        let cancel = writer.cancel_handle();
        Ok(IndexWriterPy { inner: Mutex::new(Some(writer)), cancel, path, vocab_size: vocab })
    }

    /// Add one document: a contiguous 1-D numpy array of any signed or unsigned integer type up
    /// to 64 bits (u64 excepted), read in place. Validated in full; a bad entry adds nothing.
    /// `entry` numbers the document in error messages.
    fn add_entry(&self, py: Python<'_>, tokens: &Bound<'_, PyAny>, entry: u64) -> PyResult<()> {
        let mut guard = self.inner.lock().map_err(|_| PyRuntimeError::new_err("writer lock poisoned"))?;
        let writer = guard.as_mut().ok_or_else(|| to_py(IndexError::AlreadyFinalized))?;
        macro_rules! try_dtype {
            ($($t:ty),*) => {$(
                if let Ok(array) = tokens.cast::<PyArray1<$t>>() {
                    let view = array.readonly();
                    let slice = view.as_slice()?;
                    return py.detach(|| guarded(|| writer.add_numbered_document(slice, entry)));
                }
            )*};
        }
        try_dtype!(i64, i32, u32, u16, u8, i16, i8);
        Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "entry {entry}: expected a 1-D numpy array of integers, got {}",
            tokens.get_type().name()?
        )))
    }

    /// Ask a running `finalize` (on another thread) to stop; it raises BuildCancelled.
    fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }

    #[getter]
    fn documents(&self) -> PyResult<u64> {
        let guard = self.inner.lock().map_err(|_| PyRuntimeError::new_err("writer lock poisoned"))?;
        Ok(guard.as_ref().map_or(0, |w| w.documents()))
    }

    #[getter]
    fn tokens(&self) -> PyResult<u64> {
        let guard = self.inner.lock().map_err(|_| PyRuntimeError::new_err("writer lock poisoned"))?;
        Ok(guard.as_ref().map_or(0, |w| w.tokens()))
    }

    #[getter]
    fn vocab_size(&self) -> u32 {
        self.vocab_size
    }

    /// Sort the suffixes and write the file atomically. Returns the build statistics.
    fn finalize<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let writer = self
            .inner
            .lock()
            .map_err(|_| PyRuntimeError::new_err("writer lock poisoned"))?
            .take()
            .ok_or_else(|| to_py(IndexError::AlreadyFinalized))?;
        let path = self.path.clone();
        let stats = py.detach(|| guarded(|| writer.finalize(&path)))?;
        let d = PyDict::new(py);
        d.set_item("path", self.path.clone())?;
        d.set_item("documents", stats.documents)?;
        d.set_item("tokens", stats.tokens)?;
        d.set_item("empty_documents_skipped", stats.empty_documents_skipped)?;
        d.set_item("file_bytes", stats.file_bytes)?;
        d.set_item("token_width", stats.token_width)?;
        d.set_item("sa_width", stats.sa_width)?;
        d.set_item("sa_seconds", stats.sa_seconds)?;
        d.set_item("finalize_seconds", stats.finalize_seconds)?;
        Ok(d)
    }
}

type RestTuple = (Vec<Vec<i32>>, Vec<Vec<i32>>, Vec<i32>, Vec<i32>, Vec<Vec<i32>>);

fn rest_knob(name: &str, value: Option<i64>, default: usize) -> PyResult<usize> {
    match value {
        None => Ok(default),
        Some(v) if v >= 0 => Ok(v as usize),
        Some(v) => Err(PyValueError::new_err(format!("{name} must be >= 0, got {v}"))),
    }
}

/// An open index (read into memory, or memory-mapped when large). Immutable, so one object may
/// be shared by many threads.
#[pyclass(module = "draftscope._retriever", name = "IndexReader", frozen)]
struct IndexReaderPy {
    index: Index,
}

#[pymethods]
impl IndexReaderPy {
    /// `in_memory`: True reads the file into memory, False maps it, None (default) reads files
    /// up to 1 GiB and maps larger ones.
    #[new]
    #[pyo3(signature = (path, in_memory = None))]
    fn new(py: Python<'_>, path: PathBuf, in_memory: Option<bool>) -> PyResult<Self> {
        let residency = match in_memory {
            None => Residency::Auto,
            Some(true) => Residency::Memory,
            Some(false) => Residency::Mapped,
        };
        let index = py.detach(|| guarded(|| Index::open_with(&path, residency)))?;
        Ok(IndexReaderPy { index })
    }

    /// REST's `Reader.search`: continuations of exactly `pattern`, as REST's five buffers.
    /// Tokens outside the index vocabulary match nothing (an empty result, as in REST).
    #[pyo3(signature = (py_substring, k = None, choices = None, long = None))]
    fn rest_search(&self, py: Python<'_>, py_substring: Vec<i64>, k: Option<i64>, choices: Option<i64>, long: Option<i64>) -> PyResult<RestTuple> {
        let pattern = py_substring;
        let params = SearchParams {
            max_nodes: rest_knob("choices", choices, 64)?,
            max_depth: rest_knob("long", long, 10)?,
            max_matches: rest_knob("k", k, 5000)?,
            min_suffix: pattern.len().max(1),
            max_suffix: pattern.len().max(1),
        };
        let vocab = self.index.header().vocab_size as i64;
        if pattern.is_empty() || pattern.iter().any(|&t| !(0..vocab).contains(&t)) {
            params.validate().map_err(to_py)?;
            return Ok(Default::default());
        }
        let ids: Vec<u32> = pattern.iter().map(|&t| t as u32).collect();
        let run = || {
            let tree = self.index.search(&ids, &params)?;
            let b = rest_buffers(&tree);
            Ok((b.retrieved_token_list, b.draft_attn_mask, b.tree_indices, b.draft_position_ids, b.retrieve_indices))
        };
        // A miss takes about a microsecond: releasing the GIL would cost more than it saves.
        if ids.len() <= 64 && params.max_matches <= 256 {
            guarded(run)
        } else {
            py.detach(|| guarded(run))
        }
    }

    /// Whether the index was read into memory (else it is memory-mapped).
    #[getter]
    fn in_memory(&self) -> bool {
        self.index.in_memory()
    }

    /// "same", "modified" (the open file was written: copied over, truncated) or "replaced"
    /// (the path now names another file, e.g. a rebuilt index, or none).
    fn disk_state(&self) -> &'static str {
        match self.index.disk_state() {
            DiskState::Same => "same",
            DiskState::Modified => "modified",
            DiskState::Replaced => "replaced",
        }
    }

    #[pyo3(signature = (context, max_nodes, max_depth, max_matches, min_suffix, max_suffix))]
    fn search<'py>(
        &self,
        py: Python<'py>,
        context: PyReadonlyArray1<'_, i64>,
        max_nodes: usize,
        max_depth: usize,
        max_matches: usize,
        min_suffix: usize,
        max_suffix: usize,
    ) -> PyResult<TreeTuple<'py>> {
        let ids = context_ids(context.as_slice()?, self.index.header().vocab_size, None)?;
        let params = SearchParams { max_nodes, max_depth, max_matches, min_suffix, max_suffix };
        let tree = py.detach(|| guarded(|| self.index.search(&ids, &params)))?;
        Ok(tree_to_py(py, tree))
    }

    #[pyo3(signature = (contexts, max_nodes, max_depth, max_matches, min_suffix, max_suffix))]
    fn search_batch<'py>(
        &self,
        py: Python<'py>,
        contexts: Vec<PyReadonlyArray1<'_, i64>>,
        max_nodes: usize,
        max_depth: usize,
        max_matches: usize,
        min_suffix: usize,
        max_suffix: usize,
    ) -> PyResult<Vec<TreeTuple<'py>>> {
        let vocab = self.index.header().vocab_size;
        let ids = contexts
            .iter()
            .enumerate()
            .map(|(i, c)| context_ids(c.as_slice()?, vocab, Some(i)))
            .collect::<PyResult<Vec<_>>>()?;
        let params = SearchParams { max_nodes, max_depth, max_matches, min_suffix, max_suffix };
        let trees = py.detach(|| guarded(|| self.index.search_batch(&ids, &params)))?;
        Ok(trees.into_iter().map(|t| tree_to_py(py, t)).collect())
    }

    /// Tokens of document `i`.
    fn document<'py>(&self, py: Python<'py>, i: u64) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let doc = guarded(|| self.index.document(i))?;
        Ok(PyArray1::from_vec(py, doc.into_iter().map(i64::from).collect()))
    }

    /// Check the body checksum (reads the whole file).
    fn verify(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| guarded(|| self.index.verify()))
    }

    #[getter]
    fn path(&self) -> PathBuf {
        self.index.path().to_owned()
    }
    #[getter]
    fn format_version(&self) -> u32 {
        self.index.header().version
    }
    #[getter]
    fn vocab_size(&self) -> u32 {
        self.index.header().vocab_size
    }
    #[getter]
    fn token_count(&self) -> u64 {
        self.index.header().token_count
    }
    #[getter]
    fn document_count(&self) -> u64 {
        self.index.header().doc_count
    }
    #[getter]
    fn token_width(&self) -> u8 {
        self.index.header().token_width
    }
    #[getter]
    fn sa_width(&self) -> u8 {
        self.index.header().sa_width
    }
    #[getter]
    fn tokenizer_fingerprint(&self) -> String {
        self.index.header().fingerprint.clone()
    }
}

/// libsais alone on the text a build would sort (token + 1, 0 after each document): the
/// yardstick the benchmark compares a whole build against. Returns seconds.
#[pyfunction]
#[pyo3(signature = (documents, vocab_size, threads = 0))]
fn raw_libsais_seconds(py: Python<'_>, documents: Vec<PyReadonlyArray1<'_, i64>>, vocab_size: i32, threads: u16) -> PyResult<f64> {
    let mut text: Vec<i32> = Vec::new();
    for d in &documents {
        let d = d.as_slice()?;
        if d.is_empty() {
            continue;
        }
        text.extend(d.iter().map(|&t| t as i32 + 1));
        text.push(0);
    }
    py.detach(|| {
        guarded(|| {
            let t0 = std::time::Instant::now();
            let sa = crate::sa::suffix_array_i32(&mut text, vocab_size + 1, threads)?;
            let secs = t0.elapsed().as_secs_f64();
            drop(sa);
            Ok(secs)
        })
    })
}

/// Panics inside the guarded boundary; lets the test suite prove a Rust panic surfaces as a
/// RuntimeError instead of aborting the interpreter.
#[pyfunction]
fn _panic_for_test(py: Python<'_>, in_thread_pool: bool) -> PyResult<()> {
    py.detach(|| {
        guarded(|| {
            if in_thread_pool {
                use rayon::prelude::*;
                (0..4).into_par_iter().for_each(|i| if i == 3 { panic!("deliberate panic in a worker") });
            }
            panic!("deliberate panic")
        })
    })
}

#[pymodule]
fn _retriever(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<IndexWriterPy>()?;
    m.add_class::<IndexReaderPy>()?;
    m.add_function(wrap_pyfunction!(raw_libsais_seconds, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_for_test, m)?)?;
    m.add("IndexFormatError", m.py().get_type::<IndexFormatError>())?;
    m.add("NewerIndexVersionError", m.py().get_type::<NewerIndexVersionError>())?;
    m.add("BuildCancelled", m.py().get_type::<BuildCancelled>())?;
    m.add("IndexChangedError", m.py().get_type::<IndexChangedError>())?;
    m.add("FORMAT_VERSION", crate::format::FORMAT_VERSION)?;
    Ok(())
}
