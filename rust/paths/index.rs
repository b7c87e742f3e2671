//! [`PathIndex`]: entries (by their index in a list) found by path, for the code that treats a
//! metadata's entries as a dict keyed by path (`==` and `hash` of unaligned entries, the codecs'
//! check for repeated locators). Each node carries the hash of its whole path, so the index keeps
//! that hash beside the entry and compares paths (Python equality of the keys, through the
//! caller's `same`) only between entries whose hashes agree.

use hashbrown::HashTable;
use pyo3::PyResult;

pub struct PathIndex {
    /// (path hash, entry)
    table: HashTable<(u64, usize)>,
}

impl PathIndex {
    pub fn with_capacity(n: usize) -> PathIndex {
        PathIndex {
            table: HashTable::with_capacity(n),
        }
    }

    /// The entry whose path hashes to `hash` and for which `same(entry)` holds (the first one
    /// added, of several), if any. An error of `same` ends the search.
    pub fn find(
        &self,
        hash: u64,
        mut same: impl FnMut(usize) -> PyResult<bool>,
    ) -> PyResult<Option<usize>> {
        let mut failed = None;
        let found = self.table.find(hash, |&(h, j)| {
            h == hash
                && failed.is_none()
                && same(j).unwrap_or_else(|e| {
                    failed = Some(e);
                    true
                })
        });
        match failed {
            Some(e) => Err(e),
            None => Ok(found.map(|&(_, j)| j)),
        }
    }

    /// Add entry `i`, whose path hashes to `hash`.
    pub fn insert(&mut self, hash: u64, i: usize) {
        self.table.insert_unique(hash, (hash, i), |&(h, _)| h);
    }

    /// Let entry `i` stand where entry `j` (added with `hash`) stood.
    pub fn replace(&mut self, hash: u64, j: usize, i: usize) {
        if let Some(slot) = self.table.find_mut(hash, |&(h, k)| h == hash && k == j) {
            slot.1 = i;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_found_by_hash_then_by_the_callers_equality() {
        let mut index = PathIndex::with_capacity(2);
        // entries 0 and 1 collide on hash 7 but are different paths; entry 2 is entry 0's path
        let path = ["a", "b", "a"];
        assert_eq!(index.find(7, |j| Ok(path[j] == path[0])).unwrap(), None);
        index.insert(7, 0);
        assert_eq!(index.find(7, |j| Ok(path[j] == path[1])).unwrap(), None);
        index.insert(7, 1);
        assert_eq!(index.find(7, |j| Ok(path[j] == path[2])).unwrap(), Some(0));
        assert_eq!(index.find(8, |_| Ok(true)).unwrap(), None);
        index.replace(7, 0, 2);
        assert_eq!(index.find(7, |j| Ok(path[j] == "a")).unwrap(), Some(2));
        assert_eq!(index.find(7, |j| Ok(path[j] == "b")).unwrap(), Some(1));
        for i in 3..1000 {
            index.insert(i as u64 % 13, i); // grows past its capacity
        }
        assert_eq!(index.find(3, |j| Ok(j == 991)).unwrap(), Some(991));
    }

    #[test]
    fn an_error_of_the_equality_ends_the_search() {
        let mut index = PathIndex::with_capacity(4);
        index.insert(1, 0);
        index.insert(1, 1);
        let mut asked = 0;
        let err = index.find(1, |_| {
            asked += 1;
            Err(pyo3::exceptions::PyValueError::new_err("boom"))
        });
        assert!(err.is_err());
        assert_eq!(asked, 1);
    }
}
