//! The three protobuf messages of ArrayRecord's `layout.proto`, encoded and decoded by
//! hand (proto2, every field set, in field-number order, as the C++ writer emits them).
//!
//! Also the varint helpers used by simple chunks.

/// `RiegeliPostscript.magic`: `echo 'ArrayRecord' | md5sum | cut -b 1-16`.
pub const MAGIC: u64 = 0x7193_0e70_4fda_e05e;
/// `ArrayRecordMetadata.version`.
pub const ARRAY_RECORD_VERSION: u32 = 1;

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Reads a varint64 at the start of `bytes`: (value, bytes used).
pub fn get_varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut v: u64 = 0;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        if i == 9 && b > 1 {
            return None;
        }
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Some((v, i + 1));
        }
    }
    None
}

fn put_key(out: &mut Vec<u8>, field: u32, wire_type: u8) {
    put_varint(out, (u64::from(field) << 3) | u64::from(wire_type));
}

fn put_uint(out: &mut Vec<u8>, field: u32, v: u64) {
    put_key(out, field, 0);
    put_varint(out, v);
}

fn put_bytes(out: &mut Vec<u8>, field: u32, v: &[u8]) {
    put_key(out, field, 2);
    put_varint(out, v.len() as u64);
    out.extend_from_slice(v);
}

/// A decoded field value: varint or length-delimited (fixed-width fields are skipped).
enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// Iterates over the fields of a message, failing on malformed input.
fn fields(mut bytes: &[u8]) -> impl Iterator<Item = Result<(u32, Value<'_>), String>> {
    std::iter::from_fn(move || {
        if bytes.is_empty() {
            return None;
        }
        let step = (|| {
            let (key, n) = get_varint(bytes).ok_or("bad field key")?;
            bytes = &bytes[n..];
            let field = u32::try_from(key >> 3).map_err(|_| "bad field number")?;
            let value = match key & 7 {
                0 => {
                    let (v, n) = get_varint(bytes).ok_or("bad varint")?;
                    bytes = &bytes[n..];
                    Value::Varint(v)
                }
                2 => {
                    let (len, n) = get_varint(bytes).ok_or("bad length")?;
                    let end = usize::try_from(len)
                        .ok()
                        .and_then(|l| n.checked_add(l))
                        .filter(|&e| e <= bytes.len())
                        .ok_or("length past the end of the message")?;
                    let v = &bytes[n..end];
                    bytes = &bytes[end..];
                    Value::Bytes(v)
                }
                1 | 5 => {
                    let w = if key & 7 == 1 { 8 } else { 4 };
                    if bytes.len() < w {
                        return Err("fixed field past the end of the message".to_string());
                    }
                    bytes = &bytes[w..];
                    Value::Fixed
                }
                t => return Err(format!("unsupported wire type {t}")),
            };
            Ok((field, value))
        })();
        if step.is_err() {
            bytes = &[];
        }
        Some(step)
    })
}

/// `ArrayRecordFooter`: one per data chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChunkFooter {
    pub chunk_offset: u64,
    pub decoded_data_size: u64,
    pub num_records: u64,
}

impl ChunkFooter {
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_uint(out, 1, self.chunk_offset);
        put_uint(out, 2, self.decoded_data_size);
        put_uint(out, 3, self.num_records);
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let mut f = ChunkFooter::default();
        let mut has_offset = false;
        for item in fields(bytes) {
            match item? {
                (1, Value::Varint(v)) => {
                    f.chunk_offset = v;
                    has_offset = true;
                }
                (2, Value::Varint(v)) => f.decoded_data_size = v,
                (3, Value::Varint(v)) => f.num_records = v,
                (1..=3, _) => return Err("ArrayRecordFooter field of the wrong type".into()),
                _ => {}
            }
        }
        if !has_offset {
            return Err("ArrayRecordFooter without chunk_offset".into());
        }
        Ok(f)
    }
}

/// `RiegeliFooterMetadata.array_record_metadata`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FooterMetadata {
    pub version: u32,
    pub num_chunks: u64,
    pub num_records: u64,
    pub writer_options: Option<String>,
}

impl FooterMetadata {
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut inner = Vec::new();
        put_uint(&mut inner, 1, u64::from(self.version));
        put_uint(&mut inner, 2, self.num_chunks);
        put_uint(&mut inner, 3, self.num_records);
        if let Some(w) = &self.writer_options {
            put_bytes(&mut inner, 4, w.as_bytes());
        }
        put_bytes(out, 1, &inner);
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let mut found = None;
        for item in fields(bytes) {
            if let (1, Value::Bytes(inner)) = item? {
                found = Some(inner);
            }
        }
        let inner = found.ok_or("RiegeliFooterMetadata without array_record_metadata")?;
        let mut m = FooterMetadata::default();
        for item in fields(inner) {
            match item? {
                (1, Value::Varint(v)) => {
                    m.version = u32::try_from(v).map_err(|_| "version out of range")?
                }
                (2, Value::Varint(v)) => m.num_chunks = v,
                (3, Value::Varint(v)) => m.num_records = v,
                (4, Value::Bytes(b)) => {
                    m.writer_options = Some(
                        String::from_utf8(b.to_vec()).map_err(|_| "writer_options is not UTF-8")?,
                    )
                }
                (1..=4, _) => return Err("ArrayRecordMetadata field of the wrong type".into()),
                _ => {}
            }
        }
        Ok(m)
    }
}

/// `RiegeliPostscript`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Postscript {
    pub footer_offset: u64,
    pub magic: u64,
}

impl Postscript {
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_uint(out, 1, self.footer_offset);
        put_uint(out, 2, self.magic);
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let (mut offset, mut magic) = (None, None);
        for item in fields(bytes) {
            match item? {
                (1, Value::Varint(v)) => offset = Some(v),
                (2, Value::Varint(v)) => magic = Some(v),
                _ => {}
            }
        }
        let footer_offset = offset.ok_or("RiegeliPostscript without footer_offset")?;
        let magic = magic.ok_or("RiegeliPostscript without magic")?;
        if magic != MAGIC {
            return Err(format!("bad ArrayRecord magic {magic:#x}"));
        }
        Ok(Postscript {
            footer_offset,
            magic,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip() {
        for v in [0, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v));
            assert_eq!(get_varint(&out), Some((v, out.len())));
        }
        assert_eq!(get_varint(&[0x80, 0x80]), None);
        assert_eq!(get_varint(&[0xff; 10]), None);
    }

    #[test]
    fn messages_round_trip() {
        let f = ChunkFooter {
            chunk_offset: 64,
            decoded_data_size: 1 << 23,
            num_records: 1,
        };
        let mut out = Vec::new();
        f.encode(&mut out);
        assert_eq!(out[0], 0x08);
        assert_eq!(ChunkFooter::decode(&out), Ok(f));

        let m = FooterMetadata {
            version: 1,
            num_chunks: 3,
            num_records: 3,
            writer_options: Some("group_size:1".into()),
        };
        let mut out = Vec::new();
        m.encode(&mut out);
        assert_eq!(FooterMetadata::decode(&out), Ok(m));

        let p = Postscript {
            footer_offset: 99,
            magic: MAGIC,
        };
        let mut out = Vec::new();
        p.encode(&mut out);
        assert_eq!(Postscript::decode(&out), Ok(p));
        out[2] ^= 1;
        assert!(Postscript::decode(&out).is_err());
    }

    #[test]
    fn malformed_messages_are_errors() {
        assert!(ChunkFooter::decode(&[0x0a, 0x05, 1]).is_err());
        assert!(ChunkFooter::decode(&[0x10, 0x01]).is_err());
        assert!(FooterMetadata::decode(&[0x08, 0x01]).is_err());
        assert!(Postscript::decode(&[0x0f]).is_err());
    }
}
