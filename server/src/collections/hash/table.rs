//! The general encoding of a hash past its listpack thresholds (and of a
//! set past its compact ones, members as fields with empty values): a chained
//! hash table of the Redis `dict` kind, with power-of-two bucket counts, so
//! that HSCAN can walk it with Redis's reverse-binary cursor.
//!
//! Fields and values live in a dense vector of nodes (one allocation per
//! node for its field and value together); a bucket is the index of the
//! first node of its chain, and each node holds the next one's. Removing a
//! node moves the last one into its place, so the vector stays dense and a
//! random field is one index away. The table doubles when it holds more
//! nodes than buckets and halves when it holds fewer than an eighth; a
//! resize rebuilds every chain (no incremental rehash: the cursor's
//! guarantee needs only that a bucket's nodes are those whose hash ends in
//! its bits).

use std::hash::BuildHasher;

/// "No node": the end of a chain.
const NONE: u32 = u32::MAX;

/// The fewest buckets a table has.
const MIN_BUCKETS: usize = 4;

/// One field and its value.
#[derive(Debug, Clone)]
struct Node {
    /// The field's bytes, then the value's.
    data: Box<[u8]>,
    /// Where the value starts in `data`.
    flen: usize,
    /// The field's hash (its low bits pick the bucket).
    hash: u32,
    /// The next node of the chain, or [`NONE`].
    next: u32,
}

impl Node {
    fn field(&self) -> &[u8] {
        &self.data[..self.flen]
    }

    fn value(&self) -> &[u8] {
        &self.data[self.flen..]
    }
}

/// A chained hash table from field to value (see the module documentation).
#[derive(Debug, Clone)]
pub struct Table {
    heads: Vec<u32>,
    nodes: Vec<Node>,
    hasher: foldhash::fast::RandomState,
}

impl PartialEq for Table {
    fn eq(&self, other: &Table) -> bool {
        self.len() == other.len() && self.iter().all(|(f, v)| other.get(f) == Some(v))
    }
}

impl Table {
    /// An empty table with room for `n` fields.
    pub fn with_capacity(n: usize) -> Table {
        Table {
            heads: vec![NONE; n.next_power_of_two().max(MIN_BUCKETS)],
            nodes: Vec::with_capacity(n),
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    /// How many fields it holds.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether it holds no field.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Bytes allocated: buckets, nodes, fields and values.
    pub fn heap_bytes(&self) -> usize {
        let data: usize = self.nodes.iter().map(|n| n.data.len()).sum();
        self.heads.capacity() * 4 + self.nodes.capacity() * std::mem::size_of::<Node>() + data
    }

    fn hash(&self, field: &[u8]) -> u32 {
        self.hasher.hash_one(field) as u32
    }

    fn bucket(&self, hash: u32) -> usize {
        hash as usize & (self.heads.len() - 1)
    }

    /// The index of `field`'s node.
    fn find(&self, field: &[u8]) -> Option<usize> {
        let h = self.hash(field);
        let mut j = self.heads[self.bucket(h)];
        while j != NONE {
            let n = &self.nodes[j as usize];
            if n.hash == h && n.field() == field {
                return Some(j as usize);
            }
            j = n.next;
        }
        None
    }

    /// The value of `field`.
    pub fn get(&self, field: &[u8]) -> Option<&[u8]> {
        self.find(field).map(|j| self.nodes[j].value())
    }

    /// Sets `field` to `value`; true when the field is new.
    pub fn insert(&mut self, field: &[u8], value: &[u8]) -> bool {
        if let Some(j) = self.find(field) {
            let n = &mut self.nodes[j];
            if n.value().len() == value.len() {
                n.data[n.flen..].copy_from_slice(value);
            } else {
                n.data = [field, value].concat().into_boxed_slice();
            }
            return false;
        }
        assert!(
            self.nodes.len() < NONE as usize,
            "a hash holds fewer than 2^32 fields"
        );
        if self.nodes.len() >= self.heads.len() {
            self.resize(self.heads.len() * 2);
        }
        let hash = self.hash(field);
        let b = self.bucket(hash);
        self.nodes.push(Node {
            data: [field, value].concat().into_boxed_slice(),
            flen: field.len(),
            hash,
            next: self.heads[b],
        });
        self.heads[b] = (self.nodes.len() - 1) as u32;
        true
    }

    /// Removes `field`; true when it was there.
    pub fn remove(&mut self, field: &[u8]) -> bool {
        let Some(j) = self.find(field) else {
            return false;
        };
        self.unlink(j);
        let last = self.nodes.len() - 1;
        if j != last {
            // The last node moves to `j`: whatever pointed at it points at `j`.
            self.unlink(last);
            self.nodes.swap(j, last);
            let b = self.bucket(self.nodes[j].hash);
            self.nodes[j].next = self.heads[b];
            self.heads[b] = j as u32;
        }
        self.nodes.pop();
        if self.nodes.len() * 8 < self.heads.len() && self.heads.len() > MIN_BUCKETS {
            self.resize((self.nodes.len().next_power_of_two()).max(MIN_BUCKETS));
            if self.nodes.capacity() > 2 * self.nodes.len() {
                self.nodes.shrink_to(self.nodes.len());
            }
        }
        true
    }

    /// Takes node `j` out of its chain (it stays in the vector).
    fn unlink(&mut self, j: usize) {
        let b = self.bucket(self.nodes[j].hash);
        let next = self.nodes[j].next;
        if self.heads[b] == j as u32 {
            self.heads[b] = next;
            return;
        }
        let mut k = self.heads[b] as usize;
        while self.nodes[k].next != j as u32 {
            k = self.nodes[k].next as usize;
        }
        self.nodes[k].next = next;
    }

    /// Rebuilds the chains over `buckets` buckets (a power of two).
    fn resize(&mut self, buckets: usize) {
        self.heads = vec![NONE; buckets];
        for j in 0..self.nodes.len() {
            let b = self.bucket(self.nodes[j].hash);
            self.nodes[j].next = self.heads[b];
            self.heads[b] = j as u32;
        }
    }

    /// The field and value of node `i` (`i` below the length): a random
    /// field is a random index.
    pub fn nth(&self, i: usize) -> (&[u8], &[u8]) {
        let n = &self.nodes[i];
        (n.field(), n.value())
    }

    /// Every field and value, in the nodes' order.
    pub fn iter(&self) -> Iter<'_> {
        Iter(self.nodes.iter())
    }

    /// Calls `f` with every field and value of the bucket `cursor` names
    /// (its low bits) and returns the cursor of the next bucket to visit, 0
    /// after the last: Redis's `dictScan` order, which increments the
    /// cursor's bits reversed, so a walk that starts at 0 and ends when 0
    /// comes back meets every field present for the whole walk at least
    /// once, even if the table grows or shrinks between the steps (a field
    /// may then be met twice).
    pub fn scan_bucket(&self, cursor: u64, f: &mut dyn FnMut(&[u8], &[u8])) -> u64 {
        let mask = (self.heads.len() - 1) as u64;
        let mut j = self.heads[(cursor & mask) as usize];
        while j != NONE {
            let n = &self.nodes[j as usize];
            f(n.field(), n.value());
            j = n.next;
        }
        (cursor | !mask)
            .reverse_bits()
            .wrapping_add(1)
            .reverse_bits()
    }

    /// One step of a SCAN-like walk from `cursor`: visits buckets (see
    /// [`Table::scan_bucket`]) until `count` fields came out or `10 *
    /// count` buckets were visited (Redis's bound on empty buckets), and
    /// returns the next cursor, 0 when the walk is over.
    pub fn scan(&self, cursor: u64, count: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> u64 {
        let (mut cursor, mut seen, mut visits) = (cursor, 0usize, 0usize);
        let max_visits = count.saturating_mul(10);
        loop {
            cursor = self.scan_bucket(cursor, &mut |k, v| {
                seen += 1;
                f(k, v);
            });
            visits += 1;
            if cursor == 0 || seen >= count || visits >= max_visits {
                return cursor;
            }
        }
    }
}

/// A table's fields and values, in the nodes' order.
pub struct Iter<'a>(std::slice::Iter<'a, Node>);

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|n| (n.field(), n.value()))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}
