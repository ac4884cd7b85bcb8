//! The order of a large sorted set with ranks in O(log n): the elements,
//! sorted by (score, member), cut into chunks of at most [`CHUNK`] elements,
//! with a Fenwick tree over the chunks' lengths. Finding an element's chunk
//! is a binary search over the chunks' last elements, a rank's chunk a
//! descent of the Fenwick tree; inside a chunk both are a binary search.
//! A chunk that passes [`CHUNK`] splits in two, an emptied chunk goes; either
//! rebuilds the Fenwick tree (O(n / CHUNK), once per [`CHUNK`] / 2 changes
//! at least).

use std::cmp::Ordering;

/// Most elements a chunk holds.
const CHUNK: usize = 128;

/// One element: its score and member.
pub type Element = (f64, Box<[u8]>);

/// Orders (score, member) pairs as Redis does: by score, then by member
/// bytes (scores are never NaN; -0 and 0 are equal).
pub fn cmp(a: (f64, &[u8]), b: (f64, &[u8])) -> Ordering {
    a.0.partial_cmp(&b.0)
        .unwrap_or(Ordering::Equal)
        .then_with(|| a.1.cmp(b.1))
}

/// Sorted elements with ranks (see the module documentation).
#[derive(Debug, Clone, Default)]
pub struct Ranked {
    chunks: Vec<Vec<Element>>,
    /// Fenwick tree over the chunks' lengths, 1-based.
    fen: Vec<usize>,
    len: usize,
}

impl Ranked {
    /// How many elements it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes allocated: the chunks, their members, the tree.
    pub fn heap_bytes(&self) -> usize {
        let members: usize = self.iter().map(|(_, m)| m.len()).sum();
        self.chunks.capacity() * std::mem::size_of::<Vec<Element>>()
            + self
                .chunks
                .iter()
                .map(|c| c.capacity() * std::mem::size_of::<Element>())
                .sum::<usize>()
            + members
            + self.fen.capacity() * std::mem::size_of::<usize>()
    }

    fn rebuild_fen(&mut self) {
        let n = self.chunks.len();
        self.fen.clear();
        self.fen.resize(n + 1, 0);
        for i in 1..=n {
            self.fen[i] += self.chunks[i - 1].len();
            let j = i + (i & i.wrapping_neg());
            if j <= n {
                self.fen[j] += self.fen[i];
            }
        }
    }

    fn fen_add(&mut self, chunk: usize, delta: isize) {
        let mut i = chunk + 1;
        while i < self.fen.len() {
            self.fen[i] = self.fen[i].wrapping_add_signed(delta);
            i += i & i.wrapping_neg();
        }
    }

    /// Elements in the chunks before `chunk`.
    fn before(&self, chunk: usize) -> usize {
        let (mut i, mut sum) = (chunk, 0);
        while i > 0 {
            sum += self.fen[i];
            i &= i - 1;
        }
        sum
    }

    /// The chunk and offset of rank `rank` (below the length).
    fn locate(&self, rank: usize) -> (usize, usize) {
        let n = self.chunks.len();
        let (mut pos, mut rest) = (0, rank);
        let mut step = n.next_power_of_two();
        while step > 0 {
            let next = pos + step;
            if next <= n && self.fen[next] <= rest {
                pos = next;
                rest -= self.fen[next];
            }
            step >>= 1;
        }
        (pos, rest)
    }

    /// How many leading elements satisfy `p` (which holds for a prefix of
    /// the order and not after it).
    pub fn partition_point(&self, p: impl Fn(f64, &[u8]) -> bool) -> usize {
        let ci = self.chunks.partition_point(|c| {
            let (s, m) = c.last().expect("chunks are never empty");
            p(*s, m)
        });
        match self.chunks.get(ci) {
            None => self.len,
            Some(c) => self.before(ci) + c.partition_point(|(s, m)| p(*s, m)),
        }
    }

    /// The chunk where (score, member) belongs and its place there.
    fn place(&self, score: f64, member: &[u8]) -> (usize, Result<usize, usize>) {
        let key = (score, member);
        let ci = self
            .chunks
            .partition_point(|c| {
                let (s, m) = c.last().expect("chunks are never empty");
                cmp((*s, m), key) == Ordering::Less
            })
            .min(self.chunks.len().saturating_sub(1));
        let at = match self.chunks.get(ci) {
            None => Err(0),
            Some(c) => c.binary_search_by(|(s, m)| cmp((*s, m), key)),
        };
        (ci, at)
    }

    /// The rank of (score, member), which is present.
    pub fn rank(&self, score: f64, member: &[u8]) -> Option<usize> {
        match self.place(score, member) {
            (ci, Ok(at)) => Some(self.before(ci) + at),
            _ => None,
        }
    }

    /// Adds (score, member), absent so far.
    pub fn insert(&mut self, score: f64, member: &[u8]) {
        let (ci, at) = self.place(score, member);
        let at = at.unwrap_or_else(|i| i);
        self.len += 1;
        if self.chunks.is_empty() {
            self.chunks.push(vec![(score, member.into())]);
            self.rebuild_fen();
            return;
        }
        self.chunks[ci].insert(at, (score, member.into()));
        if self.chunks[ci].len() > CHUNK {
            let tail = self.chunks[ci].split_off(CHUNK / 2);
            self.chunks.insert(ci + 1, tail);
            self.rebuild_fen();
        } else {
            self.fen_add(ci, 1);
        }
    }

    /// Removes (score, member); true when it was there.
    pub fn remove(&mut self, score: f64, member: &[u8]) -> bool {
        let (ci, Ok(at)) = self.place(score, member) else {
            return false;
        };
        self.chunks[ci].remove(at);
        self.len -= 1;
        if self.chunks[ci].is_empty() {
            self.chunks.remove(ci);
            self.rebuild_fen();
        } else {
            self.fen_add(ci, -1);
        }
        true
    }

    /// The element of rank `rank` (below the length).
    pub fn get(&self, rank: usize) -> (f64, &[u8]) {
        let (ci, off) = self.locate(rank);
        let (s, m) = &self.chunks[ci][off];
        (*s, m)
    }

    /// Every element, in order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (f64, &[u8])> + '_ {
        self.chunks.iter().flatten().map(|(s, m)| (*s, &m[..]))
    }

    /// The elements of ranks `start..end`, in order (or reversed).
    pub fn range(&self, start: usize, end: usize, rev: bool, f: &mut dyn FnMut(&[u8], f64)) {
        if start >= end {
            return;
        }
        if rev {
            let (mut ci, off) = self.locate(end - 1);
            let mut left = end - start;
            let mut chunk = &self.chunks[ci][..=off];
            loop {
                for (s, m) in chunk.iter().rev() {
                    f(m, *s);
                    left -= 1;
                    if left == 0 {
                        return;
                    }
                }
                ci -= 1;
                chunk = &self.chunks[ci];
            }
        } else {
            let (ci, off) = self.locate(start);
            let mut left = end - start;
            let first = self.chunks[ci][off..].iter();
            for (s, m) in first.chain(self.chunks[ci + 1..].iter().flatten()) {
                f(m, *s);
                left -= 1;
                if left == 0 {
                    return;
                }
            }
        }
    }

    /// Removes the elements of ranks `start..end`, calling `f` with each
    /// member.
    pub fn remove_range(&mut self, start: usize, end: usize, f: &mut dyn FnMut(&[u8])) {
        if start >= end {
            return;
        }
        let (mut ci, mut off) = self.locate(start);
        let mut left = end - start;
        while left > 0 {
            let c = &mut self.chunks[ci];
            let take = (c.len() - off).min(left);
            for (_, m) in c.drain(off..off + take) {
                f(&m);
            }
            left -= take;
            if c.is_empty() {
                self.chunks.remove(ci);
            } else {
                ci += 1;
            }
            off = 0;
        }
        self.len -= end - start;
        self.rebuild_fen();
    }
}
