//! A run of byte strings packed into one buffer: the small encoding of lists
//! and hashes, after Redis's listpack. A pack of n strings is one allocation
//! (the buffer, sized exactly, as the allocator's size classes round it) and
//! costs 2 bytes of framing per string shorter than 128 bytes.
//!
//! An entry is the string's length as a LEB128 varint (7 bits a byte, the
//! high bit set on every byte but the last), the string, then the same
//! varint bytes in reverse order. The trailing copy lets a reader step
//! backwards from an entry's end: it reads bytes towards the front while
//! their high bit is set, and the first byte without it ends the length.
//! Positions are byte offsets of entry starts (or the buffer's end); every
//! operation is O(bytes) at worst (a memmove), lookups by index walk the
//! entries.

use bytes::Bytes;

/// Byte strings packed in one buffer (see the module documentation).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pack {
    buf: Vec<u8>,
    count: usize,
}

/// Bytes the varint of `n` takes.
fn varint_size(n: usize) -> usize {
    let mut size = 1;
    let mut rest = n >> 7;
    while rest > 0 {
        size += 1;
        rest >>= 7;
    }
    size
}

/// Bytes an entry holding a string of `len` bytes takes.
pub fn entry_size(len: usize) -> usize {
    2 * varint_size(len) + len
}

/// Writes the entry for `s` into `out`, exactly [`entry_size`] bytes long.
fn write_entry(out: &mut [u8], s: &[u8]) {
    let n = varint_size(s.len());
    let mut rest = s.len();
    for i in 0..n {
        let mut b = (rest & 0x7f) as u8;
        rest >>= 7;
        if i + 1 < n {
            b |= 0x80;
        }
        out[i] = b;
        out[2 * n + s.len() - 1 - i] = b;
    }
    out[n..n + s.len()].copy_from_slice(s);
}

impl Pack {
    /// An empty pack (no allocation until the first string).
    pub const fn new() -> Pack {
        Pack {
            buf: Vec::new(),
            count: 0,
        }
    }

    /// How many strings it holds.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether it holds no string.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes of entries (the offset just past the last one).
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    /// Bytes allocated.
    pub fn heap_bytes(&self) -> usize {
        self.buf.capacity()
    }

    /// The string of the entry starting at `at`, and where the next entry
    /// starts.
    ///
    /// # Panics
    /// When `at` is not an entry's start.
    pub fn entry(&self, at: usize) -> (&[u8], usize) {
        let (mut len, mut shift, mut i) = (0usize, 0, at);
        loop {
            let b = self.buf[i];
            len |= usize::from(b & 0x7f) << shift;
            i += 1;
            if b & 0x80 == 0 {
                break;
            }
            shift += 7;
        }
        let head = i - at;
        (&self.buf[i..i + len], i + len + head)
    }

    /// The string of the entry ending just before `end`, and where that
    /// entry starts.
    ///
    /// # Panics
    /// When `end` is not an entry's end.
    pub fn entry_before(&self, end: usize) -> (&[u8], usize) {
        let (mut len, mut shift, mut i) = (0usize, 0, end);
        loop {
            i -= 1;
            let b = self.buf[i];
            len |= usize::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                break;
            }
            shift += 7;
        }
        let head = end - i;
        let start = end - 2 * head - len;
        (&self.buf[start + head..start + head + len], start)
    }

    /// The strings from the first, in order (or from the last, reversed).
    pub fn iter(&self) -> Strings<'_> {
        Strings {
            pack: self,
            front: 0,
            back: self.buf.len(),
        }
    }

    /// The offset of the entry at `index` (the end when `index` is the
    /// length), walking from the nearer end.
    ///
    /// # Panics
    /// When `index` is past the length.
    pub fn offset_of(&self, index: usize) -> usize {
        assert!(index <= self.count, "index {index} past {}", self.count);
        if index <= self.count / 2 {
            let mut at = 0;
            for _ in 0..index {
                at = self.entry(at).1;
            }
            at
        } else {
            let mut at = self.buf.len();
            for _ in index..self.count {
                at = self.entry_before(at).1;
            }
            at
        }
    }

    /// Makes room for `additional` more bytes, with an eighth of the
    /// buffer to spare when it has to grow: a pack that grows one entry at
    /// a time (a list's end node under LPUSH) then reallocates once every
    /// few entries rather than at each. [`Pack::insert_all`] alone grows
    /// exactly.
    pub fn reserve(&mut self, additional: usize) {
        if self.buf.capacity() - self.buf.len() < additional {
            self.buf.reserve_exact(additional.max(self.buf.len() / 8));
        }
    }

    /// Inserts `items`, in order, at offset `at` (an entry's start or the end).
    pub fn insert_all(&mut self, at: usize, items: &[&[u8]]) {
        let size: usize = items.iter().map(|s| entry_size(s.len())).sum();
        let old = self.buf.len();
        // Exact: a pack is sized as its entries, as a listpack is.
        self.buf.reserve_exact(size);
        self.buf.resize(old + size, 0);
        self.buf.copy_within(at..old, at + size);
        let mut pos = at;
        for s in items {
            let n = entry_size(s.len());
            write_entry(&mut self.buf[pos..pos + n], s);
            pos += n;
        }
        self.count += items.len();
    }

    /// Inserts `s` at offset `at` (an entry's start or the end).
    pub fn insert(&mut self, at: usize, s: &[u8]) {
        self.insert_all(at, &[s]);
    }

    /// Appends `s` after the last entry.
    pub fn push_back(&mut self, s: &[u8]) {
        self.insert(self.buf.len(), s);
    }

    /// Puts `s` before the first entry.
    pub fn push_front(&mut self, s: &[u8]) {
        self.insert(0, s);
    }

    /// Removes the `n` entries that fill the offsets `from..to`.
    pub fn remove_span(&mut self, from: usize, to: usize, n: usize) {
        self.buf.drain(from..to);
        self.count -= n;
        if self.buf.capacity() > 2 * self.buf.len() + 64 {
            self.buf.shrink_to_fit();
        }
    }

    /// Removes the entry at `at`.
    pub fn remove(&mut self, at: usize) {
        let next = self.entry(at).1;
        self.remove_span(at, next, 1);
    }

    /// Replaces the string of the entry at `at` with `s`.
    pub fn replace(&mut self, at: usize, s: &[u8]) {
        let (old, next) = self.entry(at);
        if old.len() == s.len() {
            let start = at + varint_size(s.len());
            self.buf[start..start + s.len()].copy_from_slice(s);
            return;
        }
        self.remove_span(at, next, 1);
        self.insert(at, s);
    }

    /// The first string, copied out, and removes it.
    pub fn pop_front(&mut self) -> Option<Bytes> {
        if self.count == 0 {
            return None;
        }
        let (s, next) = self.entry(0);
        let out = Bytes::copy_from_slice(s);
        self.remove_span(0, next, 1);
        Some(out)
    }

    /// The last string, copied out, and removes it.
    pub fn pop_back(&mut self) -> Option<Bytes> {
        if self.count == 0 {
            return None;
        }
        let end = self.buf.len();
        let (s, start) = self.entry_before(end);
        let out = Bytes::copy_from_slice(s);
        self.remove_span(start, end, 1);
        Some(out)
    }

    /// Splits off the entries from offset `at` on into a new pack; the
    /// `before` entries ahead of `at` stay.
    pub fn split_off(&mut self, at: usize, before: usize) -> Pack {
        let tail = self.buf[at..].to_vec();
        let moved = self.count - before;
        self.remove_span(at, self.buf.len(), moved);
        self.buf.shrink_to_fit();
        Pack {
            buf: tail,
            count: moved,
        }
    }
}

/// The strings of a pack between two offsets, from either end.
pub struct Strings<'a> {
    pack: &'a Pack,
    front: usize,
    back: usize,
}

impl<'a> Iterator for Strings<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.front >= self.back {
            return None;
        }
        let (s, next) = self.pack.entry(self.front);
        self.front = next;
        Some(s)
    }
}

impl DoubleEndedIterator for Strings<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.front >= self.back {
            return None;
        }
        let (s, start) = self.pack.entry_before(self.back);
        self.back = start;
        Some(s)
    }
}
