//! An index file changed on disk while open, non-regular files, and size arguments out of range:
//! each ends in an error naming the problem (or, for a copy in memory, in no change at all),
//! never in a fault, an abort or a hang.

use retriever_rs::{DiskState, Index, IndexError, IndexWriter, Residency, SearchParams, WriterOptions};
use std::path::Path;

fn write(docs: &[Vec<u32>], vocab: u32, path: &Path) {
    let mut w = IndexWriter::new(vocab, "test-fp", WriterOptions { threads: 1, force_wide: false }).unwrap();
    for d in docs {
        w.add_document(d).unwrap();
    }
    w.finalize(path).unwrap();
}

/// Different seeds give different sizes: a same-size rewrite within one tick of the file
/// system's clock would leave the time stamp as it was (harmless for safety: only a shorter file
/// faults a map, and that changes the size).
fn docs(seed: u32) -> Vec<Vec<u32>> {
    (0..200 + seed).map(|i| (0..50).map(|j| (i * 7 + j * 3 + seed) % 40).collect()).collect()
}

/// Overwrite `path` in place (same inode, truncated first), as `cp new old` does.
fn copy_over(from: &Path, to: &Path) {
    let bytes = std::fs::read(from).unwrap();
    std::fs::write(to, bytes).unwrap();
}

#[test]
fn a_copy_in_memory_keeps_searching_when_the_file_is_copied_over_or_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.idx"), dir.path().join("b.idx"));
    write(&docs(0), 40, &a);
    write(&docs(5), 40, &b);
    let index = Index::open_with(&a, Residency::Memory).unwrap();
    assert!(index.in_memory());
    let before = index.search(&[3, 6], &SearchParams::default()).unwrap();
    assert!(!before.is_empty());
    copy_over(&b, &a);
    assert_eq!(index.disk_state(), DiskState::Modified);
    assert_eq!(index.search(&[3, 6], &SearchParams::default()).unwrap(), before);
    std::fs::File::options().write(true).open(&a).unwrap().set_len(10).unwrap();
    assert_eq!(index.search(&[3, 6], &SearchParams::default()).unwrap(), before);
    index.verify().unwrap();
}

#[test]
fn a_mapped_index_refuses_to_read_a_file_written_since_it_was_opened() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.idx"), dir.path().join("b.idx"));
    write(&docs(0), 40, &a);
    write(&docs(5), 40, &b);
    let index = Index::open_with(&a, Residency::Mapped).unwrap();
    assert!(!index.in_memory());
    assert!(index.search(&[3, 6], &SearchParams::default()).is_ok());
    assert_eq!(index.disk_state(), DiskState::Same);
    std::fs::File::options().write(true).open(&a).unwrap().set_len(100).unwrap();
    for result in [index.search(&[3, 6], &SearchParams::default()).map(|_| ()), index.verify(), index.document(0).map(|_| ())] {
        match result {
            Err(IndexError::ChangedOnDisk { path }) => assert_eq!(path, a),
            other => panic!("expected ChangedOnDisk, got {other:?}"),
        }
    }
    let err = index.search_batch(&[vec![3, 6]], &SearchParams::default()).unwrap_err();
    assert!(err.to_string().contains("changed on disk"), "{err}");
}

#[test]
fn a_rebuilt_index_renamed_over_the_path_is_reported_as_replaced_and_the_old_one_still_reads() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.idx");
    write(&docs(0), 40, &a);
    for residency in [Residency::Memory, Residency::Mapped] {
        let index = Index::open_with(&a, residency).unwrap();
        let before = index.search(&[3, 6], &SearchParams::default()).unwrap();
        write(&docs(5), 40, &a); // the writer renames a new file into place
        assert_eq!(index.disk_state(), DiskState::Replaced);
        assert_eq!(index.search(&[3, 6], &SearchParams::default()).unwrap(), before);
        std::fs::remove_file(&a).unwrap();
        assert_eq!(index.disk_state(), DiskState::Replaced);
        write(&docs(0), 40, &a);
    }
}

#[test]
fn auto_reads_small_files_into_memory() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.idx");
    write(&docs(0), 40, &a);
    assert!(Index::open(&a).unwrap().in_memory());
}

#[cfg(unix)]
#[test]
fn a_fifo_or_a_directory_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe.idx");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc_mkfifo(c.as_ptr(), 0o600) }, 0);
    let err = Index::open(&fifo).err().expect("a FIFO is not an index");
    assert!(err.to_string().contains("named pipe"), "{err}");
    let err = Index::open(dir.path()).err().expect("a directory is not an index");
    assert!(err.to_string().contains("directory"), "{err}");
}

#[cfg(unix)]
extern "C" {
    #[link_name = "mkfifo"]
    fn libc_mkfifo(path: *const std::os::raw::c_char, mode: u32) -> i32;
}

#[test]
fn size_arguments_far_out_of_range_are_refused_not_allocated() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.idx");
    write(&docs(0), 40, &a);
    let index = Index::open(&a).unwrap();
    let base = SearchParams::default();
    for (params, name) in [
        (SearchParams { max_nodes: 1 << 32, ..base }, "max_nodes"),
        (SearchParams { max_nodes: usize::MAX, ..base }, "max_nodes"),
        (SearchParams { max_matches: 1 << 40, ..base }, "max_matches"),
        (SearchParams { max_suffix: usize::MAX, ..base }, "max_suffix"),
    ] {
        let err = index.search(&[3, 6], &params).unwrap_err();
        assert!(err.to_string().contains(name), "{err}");
        let err = index.search_batch(&[vec![3, 6]], &params).unwrap_err();
        assert!(err.to_string().contains(name), "{err}");
    }
    let most = SearchParams { max_nodes: 1 << 16, max_matches: 1 << 20, ..base };
    assert!(index.search(&[3, 6], &most).unwrap().len() <= 1 << 16);
}
