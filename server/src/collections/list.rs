//! A Redis list: an ordered sequence of strings (LPUSH, RPOP, LRANGE...).
//!
//! Stored as Redis 7.0 stores every list, a quicklist: a deque of
//! [`Pack`] nodes, each holding as many consecutive elements as
//! `list-max-listpack-size` allows (negative: -1 to -5 cap a node at 4, 8,
//! 16, 32 or 64 KiB; positive: at most that many elements, within 8 KiB). A
//! small list is one node: one allocation for all its elements. Pushes and
//! pops at either end touch one node; an index walks node counts from the
//! nearer end, then entries inside one node. A node that an insertion or a
//! replacement makes too big is split in two; a node emptied is dropped.

use std::collections::VecDeque;

use bytes::Bytes;

use super::pack::{entry_size, Pack};
use super::{Collection, REBUILD_CHUNK};

/// `list-max-listpack-size`'s default: nodes of at most 8 KiB.
pub const DEFAULT_FILL: i32 = -2;

/// The most bytes a node under a positive fill may hold (Redis's
/// `SIZE_SAFETY_LIMIT`).
const SAFETY_BYTES: usize = 8192;

/// An end of a list: LEFT (the head, index 0) or RIGHT (the tail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The head: LPUSH, LPOP, LEFT.
    Left,
    /// The tail: RPUSH, RPOP, RIGHT.
    Right,
}

/// A Redis list (see the module documentation).
#[derive(Debug, Clone)]
pub struct List {
    pub(super) nodes: VecDeque<Pack>,
    len: usize,
    /// `list-max-listpack-size` when the list was created (Redis keeps a
    /// list's fill from its creation too).
    fill: i32,
}

impl Default for List {
    fn default() -> List {
        List::new(DEFAULT_FILL)
    }
}

impl PartialEq for List {
    /// Lists are equal when their elements are, however they are split into
    /// nodes.
    fn eq(&self, other: &List) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl List {
    /// An empty list whose nodes follow `fill` (`list-max-listpack-size`).
    pub fn new(fill: i32) -> List {
        List {
            nodes: VecDeque::new(),
            len: 0,
            fill,
        }
    }

    /// How many elements it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no element (a stored list never is: the command
    /// that empties one removes its key).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `node` may take `add` more bytes in one more entry.
    fn fits(&self, node: &Pack, add: usize) -> bool {
        let bytes = node.bytes() + add;
        if self.fill >= 0 {
            node.len() < self.fill as usize && bytes <= SAFETY_BYTES
        } else {
            bytes <= 4096 << (self.fill.unsigned_abs().min(5) - 1)
        }
    }

    /// Whether `node` holds more than its fill allows (after an insertion or
    /// a replacement inside it).
    fn overfull(&self, node: &Pack) -> bool {
        node.len() > 1
            && if self.fill >= 0 {
                node.len() > self.fill as usize || node.bytes() > SAFETY_BYTES
            } else {
                node.bytes() > 4096 << (self.fill.unsigned_abs().min(5) - 1)
            }
    }

    /// Adds `s` at `end`.
    pub fn push(&mut self, end: End, s: &[u8]) {
        let add = entry_size(s.len());
        let node = match end {
            End::Left => self.nodes.front(),
            End::Right => self.nodes.back(),
        };
        if !node.is_some_and(|n| self.fits(n, add)) {
            // The first node of a list is sized for it alone: most lists
            // stay one node.
            if self.nodes.capacity() == 0 {
                self.nodes.reserve_exact(1);
            }
            match end {
                End::Left => self.nodes.push_front(Pack::new()),
                End::Right => self.nodes.push_back(Pack::new()),
            }
        }
        let node = match end {
            End::Left => &mut self.nodes[0],
            End::Right => self.nodes.back_mut().expect("a node"),
        };
        node.reserve(add);
        match end {
            End::Left => node.push_front(s),
            End::Right => node.push_back(s),
        }
        self.len += 1;
    }

    /// Removes and returns the element at `end`.
    pub fn pop(&mut self, end: End) -> Option<Bytes> {
        let i = match end {
            End::Left => 0,
            End::Right => self.nodes.len().checked_sub(1)?,
        };
        let node = self.nodes.get_mut(i)?;
        let s = match end {
            End::Left => node.pop_front(),
            End::Right => node.pop_back(),
        }?;
        self.len -= 1;
        if node.is_empty() {
            self.nodes.remove(i);
        }
        Some(s)
    }

    /// The node holding element `index` and the entry's offset in it.
    fn locate(&self, index: usize) -> (usize, usize) {
        debug_assert!(index < self.len);
        if index < self.len / 2 {
            let mut skipped = 0;
            for (i, node) in self.nodes.iter().enumerate() {
                if index < skipped + node.len() {
                    return (i, node.offset_of(index - skipped));
                }
                skipped += node.len();
            }
        } else {
            let mut after = self.len;
            for (i, node) in self.nodes.iter().enumerate().rev() {
                after -= node.len();
                if index >= after {
                    return (i, node.offset_of(index - after));
                }
            }
        }
        unreachable!("index {index} is below the length {}", self.len)
    }

    /// The element at `index` (0 is the head).
    pub fn get(&self, index: usize) -> Option<&[u8]> {
        if index >= self.len {
            return None;
        }
        let (i, at) = self.locate(index);
        Some(self.nodes[i].entry(at).0)
    }

    /// Replaces the element at `index`; false when it is out of range.
    pub fn set(&mut self, index: usize, s: &[u8]) -> bool {
        if index >= self.len {
            return false;
        }
        let (i, at) = self.locate(index);
        self.nodes[i].replace(at, s);
        self.split_if_overfull(i);
        true
    }

    /// Splits node `i` in two halves when it holds more than its fill.
    fn split_if_overfull(&mut self, i: usize) {
        if self.overfull(&self.nodes[i]) {
            let node = &mut self.nodes[i];
            let half = node.len() / 2;
            let at = node.offset_of(half);
            let tail = node.split_off(at, half);
            self.nodes.insert(i + 1, tail);
        }
    }

    /// Inserts `s` before (or, with `after`, after) the first element equal
    /// to `pivot`, searching from the head. Returns whether `pivot` was found.
    pub fn insert_at_pivot(&mut self, pivot: &[u8], after: bool, s: &[u8]) -> bool {
        for i in 0..self.nodes.len() {
            let node = &self.nodes[i];
            let mut at = 0;
            while at < node.bytes() {
                let (e, next) = node.entry(at);
                if e == pivot {
                    let at = if after { next } else { at };
                    self.nodes[i].insert(at, s);
                    self.len += 1;
                    self.split_if_overfull(i);
                    return true;
                }
                at = next;
            }
        }
        false
    }

    /// Removes elements equal to `s`: the first `count` from the head when
    /// `count` is positive, the last `-count` from the tail when negative,
    /// all when 0 (LREM). Returns how many went.
    pub fn remove_equal(&mut self, s: &[u8], count: i64) -> usize {
        let limit = match count {
            0 => usize::MAX,
            c => usize::try_from(c.unsigned_abs()).unwrap_or(usize::MAX),
        };
        let mut removed = 0;
        let n = self.nodes.len();
        for k in 0..n {
            if removed == limit {
                break;
            }
            let i = if count < 0 { n - 1 - k } else { k };
            let node = &mut self.nodes[i];
            if count >= 0 {
                let mut at = 0;
                while at < node.bytes() && removed < limit {
                    let (e, next) = node.entry(at);
                    if e == s {
                        node.remove(at);
                        removed += 1;
                    } else {
                        at = next;
                    }
                }
            } else {
                let mut end = node.bytes();
                while end > 0 && removed < limit {
                    let (e, start) = node.entry_before(end);
                    if e == s {
                        node.remove(start);
                        removed += 1;
                    }
                    end = start;
                }
            }
        }
        self.nodes.retain(|n| !n.is_empty());
        self.len -= removed;
        removed
    }

    /// Removes `n` elements (or all, if fewer) at `end`.
    pub fn trim(&mut self, end: End, mut n: usize) {
        n = n.min(self.len);
        self.len -= n;
        while n > 0 {
            let node = match end {
                End::Left => self.nodes.front_mut(),
                End::Right => self.nodes.back_mut(),
            };
            let node = node.expect("a node holds them");
            if node.len() <= n {
                n -= node.len();
                match end {
                    End::Left => self.nodes.pop_front(),
                    End::Right => self.nodes.pop_back(),
                };
                continue;
            }
            match end {
                End::Left => node.remove_span(0, node.offset_of(n), n),
                End::Right => node.remove_span(node.offset_of(node.len() - n), node.bytes(), n),
            }
            n = 0;
        }
    }

    /// Every element, from the head (`.rev()` from the tail).
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            nodes: &self.nodes,
            front: (0, 0),
            back: (
                self.nodes.len().saturating_sub(1),
                self.nodes.back().map_or(0, Pack::bytes),
            ),
            left: self.len,
        }
    }

    /// The elements `start..=stop` (both below the length), from `start`
    /// (`.rev()` from `stop`).
    ///
    /// # Panics
    /// When `stop` is past the last element or below `start`.
    pub fn range(&self, start: usize, stop: usize) -> Iter<'_> {
        assert!(
            start <= stop && stop < self.len,
            "{start}..={stop} of {}",
            self.len
        );
        let front = self.locate(start);
        let (i, at) = self.locate(stop);
        Iter {
            nodes: &self.nodes,
            front,
            back: (i, self.nodes[i].entry(at).1),
            left: stop - start + 1,
        }
    }
}

/// The elements of a list or of a range of it, from either end.
pub struct Iter<'a> {
    nodes: &'a VecDeque<Pack>,
    /// Node and offset of the next element from the front.
    front: (usize, usize),
    /// Node and end offset of the next element from the back.
    back: (usize, usize),
    left: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        let (mut i, mut at) = self.front;
        if at == self.nodes[i].bytes() {
            (i, at) = (i + 1, 0);
        }
        let (s, next) = self.nodes[i].entry(at);
        self.front = (i, next);
        self.left -= 1;
        Some(s)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        let (mut i, mut end) = self.back;
        if end == 0 {
            i -= 1;
            end = self.nodes[i].bytes();
        }
        let (s, start) = self.nodes[i].entry_before(end);
        self.back = (i, start);
        self.left -= 1;
        Some(s)
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl Collection for List {
    /// `quicklist`, as Redis 7.0 names every list's encoding.
    fn encoding(&self) -> &'static str {
        "quicklist"
    }

    fn len(&self) -> usize {
        self.len
    }

    fn heap_bytes(&self) -> usize {
        let nodes = self.nodes.capacity() * std::mem::size_of::<Pack>();
        nodes + self.nodes.iter().map(Pack::heap_bytes).sum::<usize>()
    }

    /// `RPUSH key e1 .. e512` for each run of elements, head first.
    fn rebuild(&self, key: &[u8], f: &mut dyn FnMut(&[&[u8]])) {
        let mut args: Vec<&[u8]> = Vec::with_capacity(REBUILD_CHUNK.min(self.len) + 2);
        for e in self.iter() {
            if args.is_empty() {
                args.extend_from_slice(&[b"RPUSH", key]);
            }
            args.push(e);
            if args.len() == REBUILD_CHUNK + 2 {
                f(&args);
                args.clear();
            }
        }
        if !args.is_empty() {
            f(&args);
        }
    }
}
