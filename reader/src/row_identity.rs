//! Which rows an iterator state belongs to.
//!
//! A state says where a rank stands in a split (epoch, block, sequence); it is only
//! meaningful over the same rows in the same order. Two outputs of the same input with
//! other shard counts can have the same number of rows and still hold other rows at
//! every index, so the row count is no identity. The identity is the **rows digest**:
//! blake3 over the split's shards, in order, each named by the blake3 of its bytes and
//! its row count:
//!
//! ```text
//! shards (manifest blake3, or the file hashed when it has no manifest) + row counts
//!   ─► rows_digest (hex) ─► in every IteratorState ─► compared on set_state/set_states
//! ```
//!
//! A copy of an output (another directory, an object store) has the same shard bytes,
//! so the same digest: its states restore there.

/// What a digest is taken over, so that another layout can never collide with this one.
const DOMAIN: &str = "probeflow rows digest v1";

/// The rows digest of shards given in order as (blake3 hex of the file, rows).
pub fn rows_digest<'a>(shards: impl IntoIterator<Item = (&'a str, u64)>) -> String {
    let mut h = blake3::Hasher::new();
    h.update(DOMAIN.as_bytes());
    h.update(b"\n");
    for (blake3, rows) in shards {
        h.update(blake3.as_bytes());
        h.update(format!(" {rows}\n").as_bytes());
    }
    h.finalize().to_hex().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_follows_every_shard_its_order_and_its_rows() {
        let (a, b) = ("a".repeat(64), "b".repeat(64));
        let base = rows_digest([(a.as_str(), 10), (b.as_str(), 20)]);
        assert_eq!(base, rows_digest([(a.as_str(), 10), (b.as_str(), 20)]));
        assert_ne!(base, rows_digest([(b.as_str(), 20), (a.as_str(), 10)]));
        assert_ne!(base, rows_digest([(a.as_str(), 10), (b.as_str(), 21)]));
        assert_ne!(base, rows_digest([(a.as_str(), 10)]));
        assert_ne!(base, rows_digest([(a.as_str(), 30)]));
        assert_eq!(base.len(), 64);
    }
}
