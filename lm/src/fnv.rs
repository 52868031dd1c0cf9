//! FNV-1a 64: the project's one non-cryptographic hash (config hashes,
//! parameter hashes across ranks, a base model's fingerprint, a build's id).

/// An FNV-1a 64 hasher fed bytes in pieces.
#[derive(Debug, Clone, Copy)]
pub struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv1a {
    pub fn eat(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    pub fn value(&self) -> u64 {
        self.0
    }

    /// The value as 16 hex digits.
    pub fn hex(&self) -> String {
        format!("{:016x}", self.0)
    }
}

/// FNV-1a 64 of a value's canonical JSON (keys sorted), as hex.
pub fn json_hash(value: &serde_json::Value) -> String {
    fn canonical(v: &serde_json::Value) -> serde_json::Value {
        match v {
            serde_json::Value::Object(m) => {
                let mut keys: Vec<_> = m.keys().collect();
                keys.sort();
                let mut out = serde_json::Map::new();
                for k in keys {
                    out.insert(k.clone(), canonical(&m[k]));
                }
                serde_json::Value::Object(out)
            }
            serde_json::Value::Array(a) => serde_json::Value::Array(a.iter().map(canonical).collect()),
            other => other.clone(),
        }
    }
    let text = canonical(value).to_string();
    let mut h = Fnv1a::default();
    h.eat(text.as_bytes());
    h.hex()
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_vectors() {
        // FNV-1a 64 of "" and "a" (the published test vectors).
        assert_eq!(super::Fnv1a::default().value(), 0xcbf2_9ce4_8422_2325);
        let mut h = super::Fnv1a::default();
        h.eat(b"a");
        assert_eq!(h.value(), 0xaf63_dc4c_8601_ec8c);
    }
}
