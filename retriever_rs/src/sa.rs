//! Suffix-array construction with libsais over the writer's text.
//!
//! The writer keeps its text as i32 symbols: token + 1, with a 0 after every document. Every
//! suffix of such a text is distinct, so the suffix array is uniquely defined (equal to a naive
//! sort), and a document end sorts before any token, which is exactly the order the reader's
//! binary search assumes when it treats a document end as "smaller than everything".

use crate::error::{IndexError, Result};
use libsais::suffix_array::AlphabetSize;
use libsais::{SuffixArrayConstruction, ThreadCount};

/// Threads for libsais: 0 means OpenMP's default (all cores).
fn thread_count(threads: u16) -> ThreadCount {
    if threads == 0 {
        ThreadCount::openmp_default()
    } else {
        ThreadCount::fixed(threads)
    }
}

/// Suffix array of an i32 text whose symbols are all in [0, alphabet_size).
/// The text is borrowed mutably (libsais uses it as scratch) and restored on return.
pub fn suffix_array_i32(text: &mut [i32], alphabet_size: i32, threads: u16) -> Result<Vec<i32>> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    if text.len() >= i32::MAX as usize {
        return Err(IndexError::Sais("text too long for 32-bit construction".into()));
    }
    let construction = SuffixArrayConstruction::for_text_mut(text)
        .in_owned_buffer32()
        .multi_threaded(thread_count(threads));
    // SAFETY: the writer only ever stores 0 (separator) and token + 1 with token < vocab_size,
    // and alphabet_size = vocab_size + 1, so every symbol is in [0, alphabet_size).
    let construction = unsafe { construction.with_alphabet_size(AlphabetSize::new(alphabet_size)) };
    construction
        .run()
        .map(|r| r.into_vec())
        .map_err(|e| IndexError::Sais(format!("{e:?}")))
}

/// The same for texts past 2^31 symbols (or when a test forces the wide path).
pub fn suffix_array_i64(text: &mut [i64], alphabet_size: i64, threads: u16) -> Result<Vec<i64>> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let construction = SuffixArrayConstruction::for_text_mut(text)
        .in_owned_buffer64()
        .multi_threaded(thread_count(threads));
    // SAFETY: as above.
    let construction = unsafe { construction.with_alphabet_size(AlphabetSize::new(alphabet_size)) };
    construction
        .run()
        .map(|r| r.into_vec())
        .map_err(|e| IndexError::Sais(format!("{e:?}")))
}

/// Reference construction by plain sorting, for tests.
pub fn naive_suffix_array<T: Ord>(text: &[T]) -> Vec<usize> {
    let mut sa: Vec<usize> = (0..text.len()).collect();
    sa.sort_by(|&a, &b| text[a..].cmp(&text[b..]));
    sa
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn libsais_matches_naive_sort(text in prop::collection::vec(0i32..6, 0..400)) {
            let mut t = text.clone();
            let sa = suffix_array_i32(&mut t, 6, 1).unwrap();
            prop_assert_eq!(&t, &text, "text restored");
            let naive: Vec<i32> = naive_suffix_array(&text).into_iter().map(|x| x as i32).collect();
            prop_assert_eq!(sa, naive);
        }

        #[test]
        fn wide_construction_matches_naive_sort(text in prop::collection::vec(0i64..70_000, 0..300)) {
            let mut t = text.clone();
            let sa = suffix_array_i64(&mut t, 70_000, 2).unwrap();
            let naive: Vec<i64> = naive_suffix_array(&text).into_iter().map(|x| x as i64).collect();
            prop_assert_eq!(sa, naive);
        }
    }
}
