//! The lookup and scan options of a `jdbc` table: [`LookupOptions`] (documented in
//! [`crate::lookup`]) and [`ScanOptions`] (documented in [`crate::source`]). The connection
//! and sink options are in [`crate::options`].

use std::collections::BTreeMap;
use std::time::Duration;

use weir_runtime::{Error, Result};

use crate::options::{check_known, parse_duration};

/// A lookup cache (`lookup.cache = 'PARTIAL'`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartialCache {
    /// Keys kept at most.
    pub max_rows: usize,
    /// A key's rows are read again this long after they were read; `None`: kept until evicted.
    pub expire_after_write: Option<Duration>,
}

impl PartialCache {
    /// The expiry in milliseconds, as `weir_operators::LookupCache` takes it.
    pub fn expire_after_write_ms(&self) -> Option<i64> {
        self.expire_after_write
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }
}

/// The lookup options of a `jdbc` table (see [`crate::lookup`]), for the lookup join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LookupOptions {
    /// `None`: `lookup.cache = 'NONE'`.
    pub cache: Option<PartialCache>,
    pub max_retries: u32,
    /// Queries in flight at once per subtask.
    pub max_concurrent: usize,
    /// A query's longest time, per attempt.
    pub timeout: Duration,
}

impl Default for LookupOptions {
    fn default() -> Self {
        LookupOptions {
            cache: None,
            max_retries: 3,
            max_concurrent: 16,
            timeout: Duration::from_secs(10),
        }
    }
}

impl LookupOptions {
    /// Reads the lookup options; the other options of a `jdbc` table are accepted and ignored.
    ///
    /// # Errors
    /// A `Config` error naming the option, its value and what to write instead, for an unknown
    /// option or a bad value.
    pub fn from_options(options: &BTreeMap<String, String>) -> Result<Self> {
        check_known(options)?;
        let get = |k: &str| options.get(k).map(|v| v.trim().to_string());
        let either = |new: &str, old: &str| -> Result<Option<(String, String)>> {
            match (get(new), get(old)) {
                (Some(_), Some(_)) => Err(Error::config(
                    old,
                    get(old).unwrap_or_default(),
                    format!("give `{new}` or its older spelling `{old}`, not both"),
                )),
                (Some(v), None) => Ok(Some((new.to_string(), v))),
                (None, Some(v)) => Ok(Some((old.to_string(), v))),
                (None, None) => Ok(None),
            }
        };
        let max_rows = either("lookup.partial-cache.max-rows", "lookup.cache.max-rows")?;
        let expire = either(
            "lookup.partial-cache.expire-after-write",
            "lookup.cache.ttl",
        )?;
        let missing = either(
            "lookup.partial-cache.cache-missing-key",
            "lookup.cache.caching-missing-key",
        )?;
        let legacy = ["lookup.cache.max-rows", "lookup.cache.ttl"]
            .iter()
            .any(|k| options.contains_key(*k));
        let partial =
            match get("lookup.cache").map(|v| v.to_ascii_uppercase()) {
                None => legacy,
                Some(v) if v == "NONE" => false,
                Some(v) if v == "PARTIAL" => true,
                Some(v) => return Err(Error::config(
                    "lookup.cache",
                    v,
                    "expected NONE or PARTIAL (a FULL cache, the whole table in memory, is not \
                     supported: use a temporal join of the table's changelog instead)",
                )),
            };
        let mut out = LookupOptions::default();
        if partial {
            let max = match &max_rows {
                None => None,
                Some((k, v)) => {
                    Some(v.parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| {
                        Error::config(k, v, "expected a positive number of keys, such as '10000'")
                    })?)
                }
            };
            let ttl = match &expire {
                None => None,
                Some((k, v)) => {
                    Some(parse_duration(v).filter(|d| !d.is_zero()).ok_or_else(|| {
                        Error::config(k, v, "expected a duration such as '10 min' or '30 s'")
                    })?)
                }
            };
            if max.is_none() && ttl.is_none() {
                return Err(Error::config(
                    "lookup.cache",
                    "PARTIAL",
                    "a PARTIAL cache needs lookup.partial-cache.max-rows or \
                     lookup.partial-cache.expire-after-write",
                ));
            }
            out.cache = Some(PartialCache {
                max_rows: max.unwrap_or(100_000),
                expire_after_write: ttl,
            });
        } else if let Some((k, v)) = max_rows.as_ref().or(expire.as_ref()) {
            return Err(Error::config(
                k,
                v,
                "the cache is off: set lookup.cache = 'PARTIAL' to use it",
            ));
        }
        if let Some((k, v)) = missing {
            if !v.eq_ignore_ascii_case("true") {
                return Err(Error::config(
                    &k,
                    v,
                    "weir's lookup cache always keeps keys without rows (as 'true'); leave the \
                     option out, or turn the cache off with lookup.cache = 'NONE'",
                ));
            }
        }
        if let Some(v) = get("lookup.max-retries") {
            out.max_retries = v.parse().ok().filter(|n| *n <= 100).ok_or_else(|| {
                Error::config(
                    "lookup.max-retries",
                    &v,
                    "expected a number of retries from 0 to 100, such as '3'",
                )
            })?;
        }
        if let Some(v) = get("lookup.max-concurrent-queries") {
            out.max_concurrent = v
                .parse()
                .ok()
                .filter(|n| (1..=1024).contains(n))
                .ok_or_else(|| {
                    Error::config(
                        "lookup.max-concurrent-queries",
                        &v,
                        "expected a number of queries from 1 to 1024, such as '16'",
                    )
                })?;
        }
        if let Some(v) = get("lookup.timeout") {
            out.timeout = parse_duration(&v).filter(|d| !d.is_zero()).ok_or_else(|| {
                Error::config(
                    "lookup.timeout",
                    &v,
                    "expected a duration such as '10 s' or '500 ms'",
                )
            })?;
        }
        Ok(out)
    }

    /// The options again, as [`LookupOptions::from_options`] reads them.
    pub fn to_options(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        let mut put = |k: &str, v: String| {
            m.insert(k.to_string(), v);
        };
        match self.cache {
            None => put("lookup.cache", "NONE".into()),
            Some(c) => {
                put("lookup.cache", "PARTIAL".into());
                put("lookup.partial-cache.max-rows", c.max_rows.to_string());
                if let Some(t) = c.expire_after_write {
                    put(
                        "lookup.partial-cache.expire-after-write",
                        format!("{} ms", t.as_millis()),
                    );
                }
            }
        }
        put("lookup.max-retries", self.max_retries.to_string());
        put(
            "lookup.max-concurrent-queries",
            self.max_concurrent.to_string(),
        );
        put("lookup.timeout", format!("{} ms", self.timeout.as_millis()));
        m
    }
}

/// The scan options of a `jdbc` table (see [`crate::source`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanOptions {
    pub partition: Option<ScanPartition>,
    /// Rows fetched at a time.
    pub fetch_size: usize,
}

/// `scan.partition.*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanPartition {
    pub column: String,
    pub num: usize,
    pub lower_bound: i64,
    pub upper_bound: i64,
}

impl ScanOptions {
    /// Reads the scan options; the other options of a `jdbc` table are accepted and ignored.
    ///
    /// # Errors
    /// A `Config` error naming the option, for an unknown option, a bad value, or partition
    /// options given only in part.
    pub fn from_options(options: &BTreeMap<String, String>) -> Result<Self> {
        check_known(options)?;
        let get = |k: &str| options.get(k).map(|v| v.trim().to_string());
        let int = |k: &str| -> Result<Option<i64>> {
            get(k)
                .map(|v| {
                    v.parse::<i64>()
                        .map_err(|_| Error::config(k, &v, "expected an integer, such as '0'"))
                })
                .transpose()
        };
        let fetch_size = match get("scan.fetch-size") {
            None => 1000,
            Some(v) => v
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=i32::MAX as usize).contains(n))
                .ok_or_else(|| {
                    Error::config(
                        "scan.fetch-size",
                        &v,
                        "expected a positive number of rows, such as '1000'",
                    )
                })?,
        };
        let names = [
            "scan.partition.column",
            "scan.partition.num",
            "scan.partition.lower-bound",
            "scan.partition.upper-bound",
        ];
        let given: Vec<&str> = names
            .iter()
            .copied()
            .filter(|k| options.contains_key(*k))
            .collect();
        if given.is_empty() {
            return Ok(ScanOptions {
                partition: None,
                fetch_size,
            });
        }
        if given.len() < names.len() {
            let missing: Vec<&str> = names
                .iter()
                .copied()
                .filter(|k| !given.contains(k))
                .collect();
            return Err(Error::config(
                given[0],
                get(given[0]).unwrap_or_default(),
                format!(
                    "the partition options go together: give {} too, or none of them",
                    missing.join(", ")
                ),
            ));
        }
        let num = get("scan.partition.num").unwrap_or_default();
        let num = num
            .parse::<usize>()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| {
                Error::config(
                    "scan.partition.num",
                    &num,
                    "expected a number of splits, such as '4'",
                )
            })?;
        let lower_bound = int("scan.partition.lower-bound")?.unwrap_or_default();
        let upper_bound = int("scan.partition.upper-bound")?.unwrap_or_default();
        if lower_bound > upper_bound {
            return Err(Error::config(
                "scan.partition.lower-bound",
                lower_bound,
                format!("is above scan.partition.upper-bound ({upper_bound})"),
            ));
        }
        Ok(ScanOptions {
            partition: Some(ScanPartition {
                column: get("scan.partition.column").unwrap_or_default(),
                num,
                lower_bound,
                upper_bound,
            }),
            fetch_size,
        })
    }

    /// The options again, as [`ScanOptions::from_options`] reads them.
    pub fn to_options(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        m.insert("scan.fetch-size".to_string(), self.fetch_size.to_string());
        if let Some(p) = &self.partition {
            m.insert("scan.partition.column".into(), p.column.clone());
            m.insert("scan.partition.num".into(), p.num.to_string());
            m.insert(
                "scan.partition.lower-bound".into(),
                p.lower_bound.to_string(),
            );
            m.insert(
                "scan.partition.upper-bound".into(),
                p.upper_bound.to_string(),
            );
        }
        m
    }
}

/// The value ranges of the splits, as Flink cuts them: `(lo, hi)` inclusive, in order.
pub fn partition_ranges(lower: i64, upper: i64, num: usize) -> Vec<(i64, i64)> {
    let count = i128::from(upper) - i128::from(lower) + 1;
    let num = (num as i128).min(count).max(1);
    let size = (count + num - 1) / num;
    // The first `big` splits are `size` wide, the rest one less.
    let big = count - (size - 1) * num;
    let mut out = Vec::new();
    let mut start = i128::from(lower);
    for i in 0..num {
        let end = start + size - 1 - i128::from(i >= big);
        out.push((start as i64, end as i64));
        start = end + 1;
    }
    out
}
