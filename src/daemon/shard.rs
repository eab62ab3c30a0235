//! Cameras sharded over several daemons with no coordinator of our own:
//! every replica reads the same config and runs only the streams that fall
//! to its shard, so each stream runs in exactly one replica.
//!
//! A stream's shard is a pure function of its name and the shard count:
//! the FNV-1a 64-bit hash of the name's UTF-8 bytes (offset basis
//! 0xcbf29ce484222325, prime 0x100000001b3), mapped to `0..N` with Lamping
//! and Veach's jump consistent hash ("A Fast, Minimal Memory, Consistent
//! Hash Algorithm", 2014). Both are fixed here, never std's `RandomState`
//! (seeded per process: replicas would disagree), so every build on every
//! machine puts a stream in the same shard. Jump hash, rather than `hash %
//! N`, moves only about 1/N of the streams when N grows by one, so the
//! rolling restart a change of N needs disturbs as few cameras as it can.
//!
//! `shard = "auto"` is for a Kubernetes StatefulSet: the index is the
//! trailing `-N` of the host name (pod `roadseg-2` is shard 2; `HOSTNAME`,
//! else gethostname(2)) and the count comes from `ROADSEG_SHARDS`.

use std::fmt;
use std::str::FromStr;

/// The shard count for `shard = "auto"`; the StatefulSet's replica count.
pub const SHARDS_ENV: &str = "ROADSEG_SHARDS";
/// Read before gethostname(2): Kubernetes sets it to the pod's name.
pub const HOSTNAME_ENV: &str = "HOSTNAME";

/// One shard of `count`: this daemon runs the streams whose name falls to `index`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

/// `[daemon] shard` as written: a fixed `"I/N"` (default `"0/1"`, every
/// stream) or `"auto"`, resolved from the environment at start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShardSetting {
    Fixed(Shard),
    Auto,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    #[error("'{0}' is not a shard: write \"I/N\" (this daemon is shard I of N, 0 <= I < N, e.g. \"0/3\"), or \"auto\" (I from the host name, N from {SHARDS_ENV})")]
    Syntax(String),
    #[error("'{0}': a shard count of 0 has no shards; N is the number of daemons sharing the config (at least 1)")]
    NoShards(String),
    #[error("'{text}': shards are numbered 0 to {} for N = {count}, so {index} is not one of them", count - 1)]
    OutOfRange { text: String, index: u32, count: u32 },
    #[error("\"auto\" takes N from {SHARDS_ENV}, which is not set: set {SHARDS_ENV} to the number of replicas (e.g. 3), or write shard = \"I/N\"")]
    NoCount,
    #[error("\"auto\": {SHARDS_ENV}='{0}' is not a shard count: set it to the number of replicas, a whole number of at least 1")]
    BadCount(String),
    #[error("\"auto\" takes I from the host name's trailing -N (StatefulSet pod roadseg-2 is shard 2), but the host name {0}: run it in a StatefulSet, set {HOSTNAME_ENV} (e.g. roadseg-0), or write shard = \"I/N\"")]
    NoOrdinal(String),
    #[error("\"auto\": host name '{host}' is shard {index}, but {SHARDS_ENV}={count} has shards 0 to {}: set {SHARDS_ENV} to the StatefulSet's replica count", count - 1)]
    OrdinalOutOfRange { host: String, index: u32, count: u32 },
}

impl Shard {
    /// One shard holding every stream.
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    /// Whether this shard runs the stream called `name`.
    pub fn owns(&self, name: &str) -> bool {
        shard_of(name, self.count) == self.index
    }

    /// `items` split into (owned, skipped) by name, each in its original order.
    pub fn partition<T>(&self, items: Vec<T>, name: impl Fn(&T) -> &str) -> (Vec<T>, Vec<T>) {
        items.into_iter().partition(|item| self.owns(name(item)))
    }

    fn checked(text: &str, index: u32, count: u32) -> Result<Shard, ShardError> {
        if count == 0 {
            return Err(ShardError::NoShards(text.to_string()));
        }
        if index >= count {
            return Err(ShardError::OutOfRange { text: text.to_string(), index, count });
        }
        Ok(Shard { index, count })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Default for ShardSetting {
    fn default() -> Self {
        ShardSetting::Fixed(Shard::ALL)
    }
}

impl fmt::Display for ShardSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShardSetting::Fixed(s) => s.fmt(f),
            ShardSetting::Auto => f.write_str("auto"),
        }
    }
}

impl FromStr for ShardSetting {
    type Err = ShardError;

    fn from_str(text: &str) -> Result<Self, ShardError> {
        let t = text.trim();
        if t.eq_ignore_ascii_case("auto") {
            return Ok(ShardSetting::Auto);
        }
        let syntax = || ShardError::Syntax(text.to_string());
        let (i, n) = t.split_once('/').ok_or_else(syntax)?;
        // Digits only: "+1/3" or " 1 / 3" are typos more likely than intent.
        let number = |s: &str| if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) { s.parse::<u32>().ok() } else { None };
        let (index, count) = (number(i).ok_or_else(syntax)?, number(n).ok_or_else(syntax)?);
        Shard::checked(text, index, count).map(ShardSetting::Fixed)
    }
}

impl ShardSetting {
    /// The shard this process is: fixed, or for "auto" from `HOSTNAME`
    /// (else gethostname) and `ROADSEG_SHARDS`.
    pub fn resolve(&self) -> Result<Shard, ShardError> {
        self.resolve_with(&|var| std::env::var(var).ok(), &system_hostname)
    }

    /// [`ShardSetting::resolve`] with the environment and host name given (tests).
    pub fn resolve_with(&self, env: &dyn Fn(&str) -> Option<String>, hostname: &dyn Fn() -> Option<String>) -> Result<Shard, ShardError> {
        if let ShardSetting::Fixed(s) = self {
            return Ok(*s);
        }
        let count_text = env(SHARDS_ENV).filter(|v| !v.trim().is_empty()).ok_or(ShardError::NoCount)?;
        let count = match count_text.trim().parse::<u32>() {
            Ok(n) if n >= 1 => n,
            _ => return Err(ShardError::BadCount(count_text)),
        };
        let host = env(HOSTNAME_ENV).filter(|h| !h.trim().is_empty()).or_else(hostname);
        let Some(host) = host else { return Err(ShardError::NoOrdinal("is unknown".into())) };
        let host = host.trim().to_string();
        let index = ordinal(&host).ok_or_else(|| ShardError::NoOrdinal(format!("'{host}' does not end in -N")))?;
        if index >= count {
            return Err(ShardError::OrdinalOutOfRange { host, index, count });
        }
        Ok(Shard { index, count })
    }
}

/// The StatefulSet ordinal: `roadseg-12` -> 12 (also `roadseg-2.roadseg.ns.svc...`).
fn ordinal(host: &str) -> Option<u32> {
    let first = host.split('.').next()?;
    let (_, digits) = first.rsplit_once('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn system_hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..end]).into_owned()).filter(|h| !h.is_empty())
}

/// FNV-1a, 64 bits, of `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// Jump consistent hash: `key` to a bucket in `0..buckets` (`buckets` >= 1).
pub fn jump_hash(mut key: u64, buckets: u32) -> u32 {
    let (mut b, mut j): (i64, i64) = (-1, 0);
    while j < i64::from(buckets) {
        b = j;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        // f64 arithmetic as in the paper: exact IEEE operations, the same everywhere.
        j = ((b + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
    }
    b as u32
}

/// The shard in `0..count` that runs the stream called `name`.
pub fn shard_of(name: &str, count: u32) -> u32 {
    jump_hash(fnv1a64(name.as_bytes()), count.max(1))
}

/// `[daemon] shard` as a string in TOML and `ROADSEG__DAEMON__SHARD`.
pub mod serde_shard {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    use super::ShardSetting;

    pub fn serialize<S: Serializer>(s: &ShardSetting, ser: S) -> Result<S::Ok, S::Error> {
        ser.collect_str(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ShardSetting, D::Error> {
        String::deserialize(d)?.parse().map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_fixed() {
        // Rule: FNV-1a 64 and the jump hash give these exact values on every build and machine (replicas must agree).
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        let got: Vec<u32> = ["front", "rear", "cam-0", "cam-1", "cam-2"].iter().map(|n| shard_of(n, 3)).collect();
        assert_eq!(got, EXPECTED_3, "shard_of(.., 3) changed: every deployed fleet would reshuffle");
        let got: Vec<u32> = (0..8).map(|n| jump_hash(n, 10)).collect();
        assert_eq!(got, EXPECTED_JUMP_10);
    }

    // Computed independently (a few lines of Python with the same constants).
    const EXPECTED_3: [u32; 5] = [1, 1, 1, 1, 0];
    const EXPECTED_JUMP_10: [u32; 8] = [0, 6, 6, 8, 1, 4, 9, 0];

    #[test]
    fn every_stream_falls_to_exactly_one_shard() {
        // Rule: for N = 1..=16, every name is owned by exactly one of the N shards, and shards are roughly even.
        let names: Vec<String> = (0..1000).map(|i| format!("cam-{i}")).collect();
        for count in 1..=16 {
            let mut sizes = vec![0usize; count as usize];
            for name in &names {
                let owners: Vec<u32> = (0..count).filter(|&index| Shard { index, count }.owns(name)).collect();
                assert_eq!(owners.len(), 1, "{name} over {count}: {owners:?}");
                sizes[owners[0] as usize] += 1;
            }
            let even = names.len() / count as usize;
            assert!(sizes.iter().all(|&s| s * 10 >= even * 7 && s * 10 <= even * 13), "N={count}: {sizes:?}");
        }
    }

    #[test]
    fn growing_n_moves_few_streams() {
        // Rule: going from N to N+1 shards moves only the streams that land in the new shard (about 1/(N+1)).
        let names: Vec<String> = (0..1000).map(|i| format!("cam-{i}")).collect();
        for n in 1..8 {
            let moved: Vec<&String> = names.iter().filter(|s| shard_of(s, n) != shard_of(s, n + 1)).collect();
            assert!(moved.iter().all(|s| shard_of(s, n + 1) == n), "N {n} -> {}: a stream moved between old shards", n + 1);
            assert!(moved.len() * (n as usize + 1) < names.len() * 13 / 10, "{} moved", moved.len());
        }
    }

    #[test]
    fn partition_keeps_order() {
        // Rule: partition splits into owned and skipped, each in config order, losing nothing.
        let names: Vec<String> = (0..9).map(|i| format!("cam-{i}")).collect();
        let mut all = Vec::new();
        for index in 0..3 {
            let (owned, skipped) = Shard { index, count: 3 }.partition(names.clone(), |n| n.as_str());
            assert_eq!(owned.len() + skipped.len(), 9);
            assert!(owned.windows(2).all(|w| w[0] < w[1]));
            all.extend(owned);
        }
        all.sort();
        assert_eq!(all, names);
    }

    #[test]
    fn settings_parse_and_bad_ones_say_why() {
        // Rule: "I/N" with 0 <= I < N and "auto" parse; "3/3", "0/0", "x" and other garbage are errors naming the form.
        assert_eq!("0/1".parse(), Ok(ShardSetting::Fixed(Shard::ALL)));
        assert_eq!("2/3".parse(), Ok(ShardSetting::Fixed(Shard { index: 2, count: 3 })));
        assert_eq!(" AUTO ".parse(), Ok(ShardSetting::Auto));
        assert_eq!(ShardSetting::default().to_string(), "0/1");
        assert!(matches!("3/3".parse::<ShardSetting>(), Err(ShardError::OutOfRange { index: 3, count: 3, .. })));
        assert!(matches!("0/0".parse::<ShardSetting>(), Err(ShardError::NoShards(_))));
        for bad in ["x", "", "1", "1/", "/3", "-1/3", "+1/3", "1/3/5", "1.0/3", "1 / 3", "99999999999/3"] {
            let e = bad.parse::<ShardSetting>().unwrap_err();
            assert!(matches!(e, ShardError::Syntax(_)), "{bad}: {e:?}");
            assert!(e.to_string().contains("\"I/N\""), "{e}");
        }
        let e = "3/3".parse::<ShardSetting>().unwrap_err().to_string();
        assert!(e.contains("0 to 2"), "{e}");
    }

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn auto_takes_the_ordinal_from_the_host_name_and_n_from_the_environment() {
        // Rule: "auto" is (trailing -N of HOSTNAME or gethostname) / ROADSEG_SHARDS; missing or garbled values are errors naming what to set.
        let none = || None;
        let auto = ShardSetting::Auto;
        let ok = |vars: &[(&str, &str)]| auto.resolve_with(&env(vars), &none);
        assert_eq!(ok(&[("HOSTNAME", "roadseg-2"), ("ROADSEG_SHARDS", "3")]), Ok(Shard { index: 2, count: 3 }));
        assert_eq!(ok(&[("HOSTNAME", "road-seg-10.roadseg.video.svc"), ("ROADSEG_SHARDS", " 12 ")]), Ok(Shard { index: 10, count: 12 }));
        let from_system = auto.resolve_with(&env(&[("ROADSEG_SHARDS", "2")]), &|| Some("box-1".into()));
        assert_eq!(from_system, Ok(Shard { index: 1, count: 2 }));
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[("HOSTNAME", "roadseg-0")], "ROADSEG_SHARDS, which is not set"),
            (&[("HOSTNAME", "roadseg-0"), ("ROADSEG_SHARDS", "three")], "ROADSEG_SHARDS='three'"),
            (&[("HOSTNAME", "roadseg-0"), ("ROADSEG_SHARDS", "0")], "ROADSEG_SHARDS='0'"),
            (&[("HOSTNAME", "laptop"), ("ROADSEG_SHARDS", "3")], "'laptop' does not end in -N"),
            (&[("HOSTNAME", "roadseg-"), ("ROADSEG_SHARDS", "3")], "does not end in -N"),
            (&[("ROADSEG_SHARDS", "3")], "host name is unknown"),
            (&[("HOSTNAME", "roadseg-3"), ("ROADSEG_SHARDS", "3")], "host name 'roadseg-3' is shard 3"),
        ];
        for (vars, expected) in cases {
            let e = ok(vars).unwrap_err().to_string();
            assert!(e.contains(expected), "{vars:?}: {e}");
        }
        assert_eq!(ShardSetting::Fixed(Shard { index: 1, count: 2 }).resolve_with(&env(&[]), &none), Ok(Shard { index: 1, count: 2 }));
    }
}
