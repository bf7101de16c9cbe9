//! ArrayRecord writer options, parsed from and printed as ArrayRecord's own option
//! strings (`group_size:1,zstd:3`, `uncompressed`, `brotli:6,window_log:22` …).
//!
//! [`WriterOptions::from_str`] accepts the keys of the C++ `ArrayRecordWriterBase::
//! Options::FromString` and applies its defaults (zstd level 3, zstd window log 20,
//! group size 65536 in C++ but 1 here, see below); [`WriterOptions::footer_string`]
//! prints the exact string the C++ writer stores in the footer, which
//! `ArrayRecordDataSource` parses for the group size.
//!
//! probeflow's default group size is 1 (`group_size:1,zstd:3`): every record is its
//! own chunk, so any row can be read without decoding its neighbours.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// probeflow's default writer options: one record per chunk, zstd level 3.
pub const DEFAULT_WRITER_OPTIONS: &str = "group_size:1,zstd:3";

/// How chunk sizes and values are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    Uncompressed,
    /// Brotli at a quality 0–11, with an optional window log 10–30 (default 22).
    Brotli {
        level: u32,
        window_log: Option<u32>,
    },
    /// Zstd at a level −131072–22, window log 10–31 (ArrayRecord's default: 20).
    Zstd {
        level: i32,
        window_log: u32,
    },
    /// Raw (unframed) Snappy; the level (1 or 2) is recorded but does not change the output.
    Snappy {
        level: u32,
    },
}

impl Compression {
    /// The compression byte that starts a simple chunk.
    pub fn type_byte(&self) -> u8 {
        match self {
            Compression::Uncompressed => 0,
            Compression::Brotli { .. } => b'b',
            Compression::Zstd { .. } => b'z',
            Compression::Snappy { .. } => b's',
        }
    }
}

/// Options of [`crate::array_record::ArrayRecordWriter`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterOptions {
    /// Records per chunk; every chunk but the last holds exactly this many.
    pub group_size: u32,
    pub compression: Compression,
    /// Pad after every chunk to a 64 KiB boundary (the footer and postscript always are).
    pub pad_to_block_boundary: bool,
}

pub const DEFAULT_OPTIONS: &str = "group_size:1,zstd:3";
const DEFAULT_ZSTD_LEVEL: i32 = 3;
const DEFAULT_ZSTD_WINDOW_LOG: u32 = 20;
const DEFAULT_BROTLI_LEVEL: u32 = 6;

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            group_size: 1,
            compression: Compression::Zstd {
                level: DEFAULT_ZSTD_LEVEL,
                window_log: DEFAULT_ZSTD_WINDOW_LOG,
            },
            pad_to_block_boundary: false,
        }
    }
}

impl WriterOptions {
    /// The option string the C++ writer stores in the footer (`writer_options`).
    ///
    /// probeflow encodes chunks on one thread, so `max_parallelism` is always 1, as
    /// the C++ writer records when it runs without a thread pool.
    pub fn footer_string(&self) -> String {
        let mut s = format!(
            "group_size:{},transpose:false,pad_to_block_boundary:{}",
            self.group_size, self.pad_to_block_boundary
        );
        match self.compression {
            Compression::Uncompressed => s.push_str(",uncompressed"),
            Compression::Brotli { level, window_log } => {
                s.push_str(&format!(",brotli:{level}"));
                if let Some(w) = window_log {
                    s.push_str(&format!(",window_log:{w}"));
                }
            }
            Compression::Zstd { level, window_log } => {
                s.push_str(&format!(",zstd:{level},window_log:{window_log}"))
            }
            Compression::Snappy { .. } => s.push_str(",snappy"),
        }
        s.push_str(",max_parallelism:1");
        s
    }
}

impl fmt::Display for WriterOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.footer_string())
    }
}

fn int_in<T: FromStr + PartialOrd + fmt::Display + Copy>(
    key: &str,
    value: &str,
    min: T,
    max: T,
) -> Result<T, String> {
    match value.parse::<T>() {
        Ok(v) if v >= min && v <= max => Ok(v),
        _ => Err(format!(
            "{key}:{value}: expected an integer from {min} to {max}"
        )),
    }
}

fn boolean(key: &str, value: Option<&str>, bare: bool) -> Result<bool, String> {
    match value {
        None | Some("") => Ok(bare),
        Some("true") => Ok(true),
        Some("false") => Ok(false),
        Some(v) => Err(format!("{key}:{v}: expected true or false")),
    }
}

impl FromStr for WriterOptions {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self, Error> {
        parse(text).map_err(|what| Error::Options {
            options: text.to_string(),
            what,
        })
    }
}

fn parse(text: &str) -> Result<WriterOptions, String> {
    let mut options = WriterOptions::default();
    let mut seen: Vec<&str> = Vec::new();
    let mut compression: Option<(&str, Option<&str>)> = None;
    let mut window_log: Option<&str> = None;
    let mut transpose = false;
    let items: Vec<&str> = if text.is_empty() {
        Vec::new()
    } else {
        text.split(',').collect()
    };
    for item in &items {
        let (key, value) = match item.split_once(':') {
            Some((k, v)) => (k, Some(v)),
            None => (*item, None),
        };
        if key.is_empty() {
            return Err("empty option (stray comma?)".into());
        }
        if seen.contains(&key) {
            return Err(format!("option {key:?} given more than once"));
        }
        seen.push(key);
        match key {
            "default" => {
                if items.len() > 1 {
                    return Err("\"default\" cannot be combined with other options".into());
                }
                if value.is_some() {
                    return Err("\"default\" takes no value".into());
                }
            }
            "group_size" => {
                options.group_size = int_in(key, value.unwrap_or(""), 1u32, i32::MAX as u32)?;
            }
            "max_parallelism" => match value {
                Some("auto") => {}
                v => {
                    int_in(key, v.unwrap_or(""), 1u32, i32::MAX as u32)?;
                }
            },
            "saturation_delay_ms" => {
                int_in(key, value.unwrap_or(""), 1u32, i32::MAX as u32)?;
            }
            "transpose" => transpose = boolean(key, value, true)?,
            "transpose_bucket_size" => {
                if value != Some("auto") {
                    int_in(key, value.unwrap_or(""), 1u64, u64::MAX)?;
                }
            }
            "pad_to_block_boundary" => {
                options.pad_to_block_boundary = boolean(key, value, false)?;
            }
            "uncompressed" | "brotli" | "zstd" | "snappy" => {
                if let Some((other, _)) = compression {
                    return Err(format!("{other:?} and {key:?} cannot be combined"));
                }
                compression = Some((key, value));
            }
            "window_log" => window_log = Some(value.unwrap_or("")),
            other => {
                return Err(format!(
                    "unknown option {other:?} (known: group_size, uncompressed, zstd, brotli, \
                     snappy, window_log, pad_to_block_boundary, transpose, max_parallelism, \
                     saturation_delay_ms, transpose_bucket_size, default)"
                ))
            }
        }
    }
    if transpose {
        return Err(
            "transpose:true writes transposed chunks, which probeflow does not support".into(),
        );
    }
    let window = |min: u32, max: u32| -> Result<Option<u32>, String> {
        match window_log {
            None | Some("auto") => Ok(None),
            Some(v) => int_in("window_log", v, min, max).map(Some),
        }
    };
    options.compression = match compression {
        None | Some(("zstd", _)) => {
            let level = match compression.and_then(|(_, v)| v) {
                None | Some("") => DEFAULT_ZSTD_LEVEL,
                Some(v) => int_in("zstd", v, -131_072i32, 22)?,
            };
            Compression::Zstd {
                level,
                window_log: window(10, 31)?.unwrap_or(DEFAULT_ZSTD_WINDOW_LOG),
            }
        }
        Some(("brotli", v)) => Compression::Brotli {
            level: match v {
                None | Some("") => DEFAULT_BROTLI_LEVEL,
                Some(v) => int_in("brotli", v, 0u32, 11)?,
            },
            window_log: window(10, 30)?,
        },
        Some((kind @ ("snappy" | "uncompressed"), v)) => {
            if window_log.is_some() {
                return Err(format!("window_log does not apply to {kind}"));
            }
            if kind == "uncompressed" {
                if v.is_some_and(|v| !v.is_empty()) {
                    return Err("uncompressed takes no value".into());
                }
                Compression::Uncompressed
            } else {
                Compression::Snappy {
                    level: match v {
                        None | Some("") => 1,
                        Some(v) => int_in("snappy", v, 1u32, 2)?,
                    },
                }
            }
        }
        Some((other, _)) => return Err(format!("unknown compression {other:?}")),
    };
    Ok(options)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn footer(s: &str) -> String {
        s.parse::<WriterOptions>().unwrap().footer_string()
    }

    #[test]
    fn defaults_match_the_cpp_writer() {
        let d = "group_size:1,transpose:false,pad_to_block_boundary:false,zstd:3,window_log:20,max_parallelism:1";
        assert_eq!(footer(""), d);
        assert_eq!(footer("default"), d);
        assert_eq!(footer(DEFAULT_OPTIONS), d);
        assert_eq!(WriterOptions::default().footer_string(), d);
    }

    #[test]
    fn compressions_print_like_the_cpp_writer() {
        assert_eq!(
            footer("group_size:7,uncompressed"),
            "group_size:7,transpose:false,pad_to_block_boundary:false,uncompressed,max_parallelism:1"
        );
        assert_eq!(
            footer("brotli"),
            "group_size:1,transpose:false,pad_to_block_boundary:false,brotli:6,max_parallelism:1"
        );
        assert_eq!(
            footer("brotli:9,window_log:18,pad_to_block_boundary:true"),
            "group_size:1,transpose:false,pad_to_block_boundary:true,brotli:9,window_log:18,max_parallelism:1"
        );
        assert_eq!(
            footer("zstd:-5,window_log:24,max_parallelism:4"),
            "group_size:1,transpose:false,pad_to_block_boundary:false,zstd:-5,window_log:24,max_parallelism:1"
        );
        assert_eq!(
            footer("snappy:2,group_size:65536"),
            "group_size:65536,transpose:false,pad_to_block_boundary:false,snappy,max_parallelism:1"
        );
    }

    #[test]
    fn bad_options_are_clear_errors() {
        for (bad, needle) in [
            ("group_size:0", "group_size:0"),
            ("group_size:x", "group_size:x"),
            ("zstd:23", "zstd:23"),
            ("zstd,brotli", "cannot be combined"),
            ("zstd,zstd:4", "more than once"),
            ("snappy,window_log:20", "window_log does not apply"),
            ("uncompressed,window_log:20", "window_log does not apply"),
            ("transpose", "transposed chunks"),
            ("compression:zstd", "unknown option \"compression\""),
            ("group_size:1,", "empty option"),
            ("default,zstd", "default"),
            ("pad_to_block_boundary:yes", "true or false"),
            ("zstd,window_log:9", "window_log:9"),
        ] {
            let err = bad.parse::<WriterOptions>().unwrap_err().to_string();
            assert!(err.contains(needle), "{bad}: {err}");
            assert!(err.contains(bad), "{bad}: {err}");
        }
    }
}
