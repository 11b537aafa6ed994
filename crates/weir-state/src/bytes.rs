//! Reading back the little-endian byte forms that state kept on disk is written in (an
//! aggregate's state, a deduplication key's): [`Reader`] takes fixed-size numbers and
//! length-prefixed byte strings from the front of a slice, and fails, naming what it read,
//! when the bytes end early.

use crate::{Error, Result};

/// Takes values from the front of a byte slice.
pub struct Reader<'a> {
    what: &'static str,
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader of `bytes`, which hold `what` (for errors).
    pub fn new(what: &'static str, bytes: &'a [u8]) -> Self {
        Reader { what, rest: bytes }
    }

    /// What is left.
    pub fn rest(&self) -> &'a [u8] {
        self.rest
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.rest.len() < n {
            return Err(Error::Internal(format!(
                "{} on disk ends early: {n} bytes wanted, {} left",
                self.what,
                self.rest.len()
            )));
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }

    /// The next `N` bytes.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        Ok(self.take(N)?.try_into().expect("N bytes taken"))
    }

    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    pub fn u32(&mut self) -> Result<u32> {
        self.array().map(u32::from_le_bytes)
    }

    pub fn i64(&mut self) -> Result<i64> {
        self.array().map(i64::from_le_bytes)
    }

    pub fn f64(&mut self) -> Result<f64> {
        self.array().map(f64::from_le_bytes)
    }

    /// A byte string written as its length (`u32`) and its bytes.
    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    /// Fails unless every byte was read.
    pub fn finish(&self) -> Result<()> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(Error::Internal(format!(
                "{} on disk has {} bytes past its end",
                self.what,
                self.rest.len()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_was_written_and_fails_naming_what_ends_early() {
        let mut b = vec![7u8];
        b.extend_from_slice(&(-3i64).to_le_bytes());
        b.extend_from_slice(&2u32.to_le_bytes());
        b.extend_from_slice(b"ab");
        let mut r = Reader::new("a test value", &b);
        assert_eq!(r.u8().unwrap(), 7);
        assert_eq!(r.i64().unwrap(), -3);
        assert_eq!(r.bytes().unwrap(), b"ab");
        r.finish().unwrap();
        let err = r.i64().unwrap_err().to_string();
        assert!(err.contains("a test value on disk ends early"), "{err}");
    }
}
