//! Hot-key detection on keyed exchanges: a Space-Saving sketch of the heaviest keys.
//!
//! Every sender of a keyed exchange keeps a sketch of the keys it routes (sampling every
//! `SAMPLE`-th row keeps it cheap), publishes its top keys to the exchange's metrics after each
//! batch, and may use it to salt only the hot keys. Space-Saving (Metwally et al.) keeps `K`
//! counters; a key's count is overestimated by at most the count it replaced, so every key
//! with more than `1/K` of the rows is found.

use std::collections::HashMap;
use std::sync::Mutex;

use arrow_row::{RowConverter, SortField};
use arrow_schema::SchemaRef;
use serde::Serialize;

/// Counters kept per sketch.
pub const TOP_K: usize = 16;
/// One row in this many is counted.
pub const SAMPLE: u64 = 8;

/// A Space-Saving sketch over encoded keys.
#[derive(Debug, Default, Clone)]
pub struct SpaceSaving {
    /// At most [`TOP_K`] keys with their counts, searched one by one: for so few short keys a
    /// scan costs less than hashing the key, and a replaced key's bytes are written over.
    counters: Vec<(Vec<u8>, u64)>,
    /// Rows offered (sampled and not).
    pub rows: u64,
}

impl SpaceSaving {
    /// Offers one row's key; counts it if it falls on the sample stride.
    pub fn offer(&mut self, key: &[u8]) {
        self.rows += 1;
        if self.rows.is_multiple_of(SAMPLE) {
            self.count(key);
        }
    }

    /// The rows among the next `n` offered that fall on the sample stride: the ones whose keys
    /// [`SpaceSaving::offer_sampled`] takes.
    pub fn stride(&self, n: usize) -> impl Iterator<Item = usize> {
        let first = (SAMPLE - 1 - self.rows % SAMPLE) as usize;
        (first..n).step_by(SAMPLE as usize)
    }

    /// Offers `n` rows by the keys of those on the stride ([`SpaceSaving::stride`], in its
    /// order): as offering each of the `n`, without the keys of the rest.
    pub fn offer_sampled<'k>(&mut self, n: usize, sampled: impl IntoIterator<Item = &'k [u8]>) {
        for key in sampled {
            self.count(key);
        }
        self.rows += n as u64;
    }

    fn count(&mut self, key: &[u8]) {
        if let Some((_, c)) = self.counters.iter_mut().find(|(k, _)| k[..] == *key) {
            *c += 1;
            return;
        }
        if self.counters.len() < TOP_K {
            self.counters.push((key.to_vec(), 1));
            return;
        }
        let (k, c) = (self.counters.iter_mut())
            .min_by_key(|(_, c)| *c)
            .expect("full");
        k.clear();
        k.extend_from_slice(key);
        *c += 1;
    }

    /// The estimated share of rows with `key` (0 when it is not among the top keys).
    pub fn share(&self, key: &[u8]) -> f64 {
        let sampled = self.rows / SAMPLE;
        if sampled == 0 {
            return 0.0;
        }
        (self.counters.iter())
            .find(|(k, _)| k[..] == *key)
            .map_or(0.0, |(_, c)| *c as f64 / sampled as f64)
    }

    /// Top keys with their estimated row counts, heaviest first.
    pub fn top(&self) -> Vec<(Box<[u8]>, u64)> {
        let mut v: Vec<_> = self
            .counters
            .iter()
            .map(|(k, c)| (k.clone().into_boxed_slice(), c * SAMPLE))
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v
    }
}

/// The hot keys seen on one keyed exchange (all senders).
#[derive(Debug)]
pub struct ExchangeMetrics {
    pub from: String,
    pub to: String,
    converter: RowConverter,
    /// Per sender subtask: its latest top keys and rows routed.
    senders: Mutex<Vec<SenderTop>>,
}

/// One sender's top keys (encoded key, estimated rows) and the rows it routed.
type SenderTop = (Vec<(Box<[u8]>, u64)>, u64);

/// A hot key and its share of the exchange's rows.
#[derive(Debug, Clone, Serialize)]
pub struct HotKey {
    pub key: String,
    pub rows: u64,
    pub share: f64,
}

impl ExchangeMetrics {
    pub fn new(
        from: String,
        to: String,
        schema: &SchemaRef,
        keys: &[String],
        senders: usize,
    ) -> crate::Result<Self> {
        let fields = keys
            .iter()
            .map(|k| {
                Ok(SortField::new(
                    schema.field_with_name(k)?.data_type().clone(),
                ))
            })
            .collect::<Result<Vec<_>, arrow_schema::ArrowError>>()?;
        Ok(ExchangeMetrics {
            from,
            to,
            converter: RowConverter::new(fields)?,
            senders: Mutex::new(vec![(Vec::new(), 0); senders]),
        })
    }

    /// Publishes sender `subtask`'s sketch.
    pub fn publish(&self, subtask: usize, sketch: &SpaceSaving) {
        let mut s = self.senders.lock().expect("hot keys lock");
        s[subtask] = (sketch.top(), sketch.rows);
    }

    /// The heaviest keys over all senders, with their share of all rows.
    pub fn top(&self, n: usize) -> Vec<HotKey> {
        let s = self.senders.lock().expect("hot keys lock");
        let total: u64 = s.iter().map(|x| x.1).sum();
        let mut sum: HashMap<&[u8], u64> = HashMap::new();
        for (top, _) in s.iter() {
            for (k, c) in top {
                *sum.entry(k).or_default() += c;
            }
        }
        let mut v: Vec<(&[u8], u64)> = sum.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        v.truncate(n);
        let parser = self.converter.parser();
        v.into_iter()
            .map(|(k, c)| {
                let key = self
                    .converter
                    .convert_rows([parser.parse(k)])
                    .ok()
                    .map(|cols| {
                        let b = arrow_array::RecordBatch::try_from_iter(
                            cols.into_iter()
                                .enumerate()
                                .map(|(i, c)| (format!("k{i}"), c)),
                        );
                        b.map(|b| {
                            (0..b.num_columns())
                                .map(|i| {
                                    crate::display::row_to_string(
                                        &b.project(&[i]).expect("column"),
                                        0,
                                    )
                                })
                                .map(|s| s.split_once('=').map(|x| x.1.to_string()).unwrap_or(s))
                                .collect::<Vec<_>>()
                                .join(", ")
                        })
                        .unwrap_or_default()
                    })
                    .unwrap_or_default();
                HotKey {
                    key,
                    rows: c,
                    share: if total > 0 {
                        c as f64 / total as f64
                    } else {
                        0.0
                    },
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Space-Saving's guarantees over the sampled rows: every sampled row counts once, no
        /// key kept is counted below its true count, and every key with more than a `TOP_K`th
        /// of the sampled rows is kept.
        #[test]
        fn the_sketch_keeps_every_heavy_key_and_never_undercounts(
            keys in prop::collection::vec(
                prop_oneof![3 => 0u16..4, 1 => 0u16..500],
                0..3_000,
            ),
        ) {
            let mut s = SpaceSaving::default();
            let mut truth: HashMap<Vec<u8>, u64> = HashMap::new();
            for (i, k) in keys.iter().enumerate() {
                let key = k.to_le_bytes();
                s.offer(&key);
                if (i as u64 + 1).is_multiple_of(SAMPLE) {
                    *truth.entry(key.to_vec()).or_default() += 1;
                }
            }
            let sampled = keys.len() as u64 / SAMPLE;
            let top = s.top();
            prop_assert!(top.len() <= TOP_K);
            prop_assert_eq!(top.iter().map(|(_, c)| c / SAMPLE).sum::<u64>(), sampled);
            for (k, c) in &top {
                prop_assert!(c / SAMPLE >= truth.get(&k[..]).copied().unwrap_or(0));
            }
            for (k, c) in &truth {
                if *c * TOP_K as u64 > sampled {
                    prop_assert!(top.iter().any(|(t, _)| t[..] == k[..]), "{:?} ({})", k, c);
                }
            }
        }

        /// Offering a batch by the keys of its rows on the stride counts what offering every
        /// row does, however the rows are cut into batches.
        #[test]
        fn offering_the_sampled_rows_of_a_batch_is_offering_every_row(
            keys in prop::collection::vec(0u16..40, 0..400),
            cuts in prop::collection::vec(0usize..30, 0..40),
        ) {
            let mut every = SpaceSaving::default();
            let mut sampled = SpaceSaving::default();
            let mut rest = &keys[..];
            for cut in cuts.into_iter().chain([usize::MAX]) {
                let (batch, after) = rest.split_at(cut.min(rest.len()));
                rest = after;
                for k in batch {
                    every.offer(&k.to_le_bytes());
                }
                let on_stride: Vec<[u8; 2]> =
                    sampled.stride(batch.len()).map(|i| batch[i].to_le_bytes()).collect();
                sampled.offer_sampled(batch.len(), on_stride.iter().map(|k| &k[..]));
            }
            prop_assert_eq!(every.rows, sampled.rows);
            prop_assert_eq!(every.top(), sampled.top());
        }
    }

    #[test]
    fn space_saving_finds_the_hot_key_and_its_share() {
        let mut s = SpaceSaving::default();
        for i in 0..100_000u64 {
            if i % 5 != 0 {
                s.offer(b"celebrity");
            } else {
                s.offer(&(i % 9_973).to_le_bytes());
            }
        }
        let top = s.top();
        assert_eq!(&*top[0].0, b"celebrity");
        assert!(
            (s.share(b"celebrity") - 0.8).abs() < 0.02,
            "{}",
            s.share(b"celebrity")
        );
    }
}
