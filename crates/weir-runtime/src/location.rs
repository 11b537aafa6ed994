//! Places outside the job that sinks write and sources read, so that a job which would
//! overwrite its own input is refused before anything runs.

use std::path::{Component, Path, PathBuf};

/// A place a sink writes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Location {
    /// A file, as [`normalise_path`] spells it.
    File(PathBuf),
    /// A Kafka topic of the cluster reached through `bootstrap_servers`.
    Topic {
        bootstrap_servers: String,
        topic: String,
    },
    /// A table of a database: where the database is (never a password) and the table's name
    /// as the sink resolves it.
    Table { database: String, table: String },
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::File(p) => write!(f, "file {}", p.display()),
            Location::Topic {
                bootstrap_servers,
                topic,
            } => write!(f, "topic `{topic}` on {bootstrap_servers}"),
            Location::Table { database, table } => write!(f, "table `{table}` in {database}"),
        }
    }
}

impl Location {
    /// Whether two Kafka locations are the same topic: same name, and the clusters share a
    /// bootstrap server.
    pub fn same_topic(&self, bootstrap_servers: &str, topic: &str) -> bool {
        match self {
            Location::Topic {
                bootstrap_servers: s,
                topic: t,
            } => {
                t == topic && {
                    let mine: Vec<&str> = s.split(',').map(str::trim).collect();
                    bootstrap_servers
                        .split(',')
                        .map(str::trim)
                        .any(|b| mine.contains(&b))
                }
            }
            Location::File(_) | Location::Table { .. } => false,
        }
    }
}

/// The places a job's sinks write, indexed so that a source can look up what it reads
/// ([`crate::SourceFactory::reads_any`]) rather than test every place: a statement set of
/// 10 000 INSERTs has as many sinks as sources.
#[derive(Debug, Default)]
pub struct Written {
    places: Vec<Location>,
    files: std::collections::BTreeMap<PathBuf, usize>,
}

impl Written {
    pub fn new(places: Vec<Location>) -> Self {
        let files = places
            .iter()
            .enumerate()
            .filter_map(|(i, p)| match p {
                Location::File(f) => Some((f.clone(), i)),
                _ => None,
            })
            .collect();
        Written { places, files }
    }

    pub fn places(&self) -> &[Location] {
        &self.places
    }

    /// The place that is the file `path` (as [`normalise_path`] spells it).
    pub fn file(&self, path: &Path) -> Option<usize> {
        self.files.get(path).copied()
    }

    /// A place that is a file inside the folder `dir` (as [`normalise_path`] spells it), at
    /// any depth. Paths order by components, so a folder's files follow it in the index.
    pub fn file_under(&self, dir: &Path) -> Option<usize> {
        self.files
            .range(dir.to_path_buf()..)
            .take_while(|(p, _)| p.starts_with(dir))
            .find(|(p, _)| p.as_path() != dir)
            .map(|(_, &i)| i)
    }
}

/// Takes `path`, an output file or folder (as [`normalise_path`] spells it), for this running
/// job: an exclusive advisory lock on a hidden file beside it (`out.csv` → `.out.csv.lock`), with
/// `holder` written in it, released (and the file deleted) when the lock is dropped; the OS
/// releases it when the process ends (a kill -9 leaves the hidden file, taken by the next job). A path that
/// exists and is neither a regular file nor a folder (a FIFO, a device) is not locked: the sink
/// refuses it.
///
/// # Errors
/// `OutputInUse` naming the holder if another job (in this process or another) holds it; an I/O
/// error if the lock file cannot be created.
pub(crate) fn lock_output(
    path: &Path,
    holder: &str,
    what: &str,
    hint: &str,
) -> crate::Result<Option<weir_state::checkpoint::FileLock>> {
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
        return Ok(None);
    }
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Ok(None);
    };
    let lock = dir.join(format!(".{}.lock", name.to_string_lossy()));
    // A lock file that cannot be made (a file in the way of its folder) is the outside world,
    // which may be put right before the next try, as for the sink's own files.
    weir_state::checkpoint::lock_file(&lock, holder, true)
        .map_err(|e| crate::Error::io(format!("{what} {}", path.display()), e))?
        .map(Some)
        .map_err(|holder| crate::Error::OutputInUse {
            what: what.to_string(),
            path: path.to_path_buf(),
            holder,
            hint: hint.to_string(),
        })
}

/// `path` made absolute, with symbolic links in the part that exists resolved (as the OS
/// resolves them, `..` after a link included) and `.` and `..` taken out of the rest, so that
/// two spellings of one file compare equal. Reads the file system; never fails (a part that
/// cannot be resolved is kept as written).
pub fn normalise_path(path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    // The longest part that exists, resolved by the OS; the rest appended lexically.
    let mut rest: Vec<Component> = Vec::new();
    let mut head = abs.as_path();
    let mut out = loop {
        if let Ok(real) = head.canonicalize() {
            break real;
        }
        match (head.components().next_back(), head.parent()) {
            (Some(last), Some(parent)) => {
                rest.push(last);
                head = parent;
            }
            _ => break PathBuf::new(),
        }
    };
    for c in rest.into_iter().rev() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_files_are_found_by_path_and_under_their_folders_only() {
        let w = Written::new(vec![
            Location::Topic {
                bootstrap_servers: "b:9092".into(),
                topic: "t".into(),
            },
            Location::File("/data/out/a.csv".into()),
            Location::File("/data/out-2/b.csv".into()),
            Location::File("/data/deep/x/y/c.csv".into()),
        ]);
        assert_eq!(w.file(Path::new("/data/out/a.csv")), Some(1));
        assert_eq!(w.file(Path::new("/data/out")), None);
        assert_eq!(w.file_under(Path::new("/data/out")), Some(1));
        assert_eq!(w.file_under(Path::new("/data/out-2")), Some(2));
        assert_eq!(w.file_under(Path::new("/data/deep")), Some(3));
        assert_eq!(w.file_under(Path::new("/data/deep/x/y/c.csv")), None);
        assert_eq!(w.file_under(Path::new("/data/ou")), None);
        assert_eq!(w.file_under(Path::new("/elsewhere")), None);
        assert_eq!(
            w.file_under(Path::new("/")),
            Some(3),
            "the first in path order"
        );
    }

    #[test]
    fn two_spellings_of_one_file_are_one_location() {
        let dir = std::env::temp_dir().join(format!("weir-location-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("a")).unwrap();
        let direct = normalise_path(&dir.join("a/out.csv"));
        let round = normalise_path(&dir.join("a/../a/./out.csv"));
        assert_eq!(direct, round);
        assert!(direct.is_absolute());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn dot_dot_after_a_symbolic_link_goes_where_the_os_goes() {
        let dir = std::env::temp_dir().join(format!("weir-location-link-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("out")).unwrap();
        std::fs::create_dir_all(dir.join("d/e")).unwrap();
        std::os::unix::fs::symlink(dir.join("d/e"), dir.join("out/link")).unwrap();
        // The OS writes out/link/../x.csv to d/x.csv.
        assert_eq!(
            normalise_path(&dir.join("out/link/../x.csv")),
            normalise_path(&dir.join("d/x.csv"))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn topics_match_on_a_shared_bootstrap_server() {
        let l = Location::Topic {
            bootstrap_servers: "a:9092, b:9092".into(),
            topic: "t".into(),
        };
        assert!(l.same_topic("b:9092", "t"));
        assert!(!l.same_topic("b:9092", "u"));
        assert!(!l.same_topic("c:9092", "t"));
    }
}
