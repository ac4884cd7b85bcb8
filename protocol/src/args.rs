//! The argument cursor handlers read their arguments through.
//!
//! The dispatcher has already checked arity against the command table, so a
//! handler walks its arguments in order with typed reads and ends with
//! [`Args::finish`]; no index arithmetic. Each read returns an [`ArgError`]
//! that the server turns into Redis's exact error text.

use bytes::Bytes;

use crate::int::{parse_f64, parse_i64, parse_u64};

/// Why an argument could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ArgError {
    /// No argument left where one was required (`ERR syntax error`).
    Missing,
    /// Not a strict decimal integer in range
    /// (`ERR value is not an integer or out of range`).
    NotInteger,
    /// Not a finite float (`ERR value is not a valid float`).
    NotFloat,
    /// An unexpected or extra argument (`ERR syntax error`).
    Syntax,
}

/// A cursor over one request's arguments. Position 0 is the command name.
#[derive(Debug, Clone)]
pub struct Args {
    items: Vec<Bytes>,
    pos: usize,
}

impl Args {
    /// Wraps a decoded request; the cursor starts after the command name.
    pub fn new(items: Vec<Bytes>) -> Args {
        Args { items, pos: 1 }
    }

    /// The command name as sent (any case).
    pub fn name(&self) -> &[u8] {
        self.items.first().map(|b| &b[..]).unwrap_or(b"")
    }

    /// All arguments including the name, regardless of the cursor (those
    /// moved out by [`Args::next`] or [`Args::key`] are empty).
    pub fn all(&self) -> &[Bytes] {
        &self.items
    }

    /// Consumes the cursor, giving back every argument including the name.
    pub fn into_inner(self) -> Vec<Bytes> {
        self.items
    }

    /// How many arguments are left after the cursor.
    pub fn remaining(&self) -> usize {
        self.items.len() - self.pos
    }

    /// The next argument without consuming it.
    pub fn peek(&self) -> Option<&Bytes> {
        self.items.get(self.pos)
    }

    /// Moves the next argument out (no reference-count traffic: the cursor
    /// keeps an empty value in its place, so [`Args::all`] no longer shows it).
    ///
    /// # Errors
    /// [`ArgError::Missing`] when none is left.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Bytes, ArgError> {
        let item = self.items.get_mut(self.pos).ok_or(ArgError::Missing)?;
        self.pos += 1;
        Ok(std::mem::take(item))
    }

    /// The next argument, read as a key (moved out, as [`Args::next`]).
    ///
    /// # Errors
    /// [`ArgError::Missing`] when none is left.
    pub fn key(&mut self) -> Result<Bytes, ArgError> {
        self.next()
    }

    /// Reads the next argument in place (it stays visible through [`Args::all`]).
    fn next_ref(&mut self) -> Result<&[u8], ArgError> {
        let item = self.items.get(self.pos).ok_or(ArgError::Missing)?;
        self.pos += 1;
        Ok(item)
    }

    /// The next argument as a strict `i64`.
    ///
    /// # Errors
    /// [`ArgError::NotInteger`] unless it is a canonical decimal `i64`.
    pub fn i64(&mut self) -> Result<i64, ArgError> {
        parse_i64(self.next_ref()?).ok_or(ArgError::NotInteger)
    }

    /// The next argument as a strict non-negative `u64`.
    ///
    /// # Errors
    /// [`ArgError::NotInteger`] unless it is a canonical decimal in `u64`.
    pub fn u64(&mut self) -> Result<u64, ArgError> {
        parse_u64(self.next_ref()?).ok_or(ArgError::NotInteger)
    }

    /// The next argument as a finite `f64`.
    ///
    /// # Errors
    /// [`ArgError::NotFloat`] unless it parses as a float with no spaces.
    pub fn f64(&mut self) -> Result<f64, ArgError> {
        parse_f64(self.next_ref()?).ok_or(ArgError::NotFloat)
    }

    /// Consumes the next argument if it equals `word`, ignoring ASCII case.
    pub fn flag(&mut self, word: &str) -> bool {
        match self.items.get(self.pos) {
            Some(b) if b.eq_ignore_ascii_case(word.as_bytes()) => {
                self.pos += 1;
                true
            }
            _ => false,
        }
    }

    /// Consumes and returns the next argument upper-cased, for option parsing.
    ///
    /// # Errors
    /// [`ArgError::Missing`] when none is left.
    pub fn word(&mut self) -> Result<String, ArgError> {
        Ok(String::from_utf8_lossy(self.next_ref()?).to_ascii_uppercase())
    }

    /// Succeeds only when every argument has been read.
    ///
    /// # Errors
    /// [`ArgError::Syntax`] when arguments are left over.
    pub fn finish(&self) -> Result<(), ArgError> {
        if self.pos == self.items.len() {
            Ok(())
        } else {
            Err(ArgError::Syntax)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_reads_in_order() {
        let mut a = Args::new(
            ["SET", "k", "10", "px", "5"]
                .iter()
                .map(|s| Bytes::from(*s))
                .collect(),
        );
        assert_eq!(a.name(), b"SET");
        assert_eq!(a.key().unwrap(), Bytes::from("k"));
        assert_eq!(a.i64().unwrap(), 10);
        assert!(!a.flag("EX"));
        assert!(a.flag("PX"));
        assert_eq!(a.finish(), Err(ArgError::Syntax));
        assert_eq!(a.u64().unwrap(), 5);
        assert_eq!(a.finish(), Ok(()));
        assert_eq!(a.next(), Err(ArgError::Missing));
    }
}
