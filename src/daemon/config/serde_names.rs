//! Serde forms whose error messages should list the accepted values.

/// `precision = "auto" | "f32" | "fp16" | "bf16"` as `Option<Precision>`.
pub mod auto_precision {
    use serde::{Deserialize, Deserializer, Serialize, Serializer, de::Error};

    use crate::backend::Precision;

    pub fn serialize<S: Serializer>(p: &Option<Precision>, s: S) -> Result<S::Ok, S::Error> {
        match p {
            None => s.serialize_str("auto"),
            Some(p) => p.serialize(s),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Precision>, D::Error> {
        let s = String::deserialize(d)?;
        if s.trim().eq_ignore_ascii_case("auto") {
            return Ok(None);
        }
        s.trim().parse().map(Some).map_err(|e: crate::backend::UnknownPrecision| D::Error::custom(format!("{e}, or auto")))
    }
}

/// `preset = "fast" | "accurate"`, any case.
pub mod preset {
    use clap::ValueEnum;
    use serde::{Deserialize, Deserializer, Serialize, Serializer, de::Error};

    use crate::engine::Preset;

    pub fn serialize<S: Serializer>(p: &Preset, s: S) -> Result<S::Ok, S::Error> {
        p.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Preset, D::Error> {
        let s = String::deserialize(d)?;
        Preset::from_str(s.trim(), true).map_err(|_| {
            let names: Vec<String> =
                Preset::value_variants().iter().filter_map(|p| Some(p.to_possible_value()?.get_name().to_string())).collect();
            D::Error::custom(format!("unknown preset '{s}' (expected {})", names.join(" or ")))
        })
    }
}

/// A list of names as a TOML array or a comma-separated string; the string
/// form is how `ROADSEG__MODEL__ROAD_CLASSES=road,lane` arrives.
pub mod name_list {
    use std::fmt;

    use serde::de::{self, Deserializer, SeqAccess, Visitor};
    use serde::{Serialize, Serializer};

    pub fn serialize<S: Serializer>(names: &[String], s: S) -> Result<S::Ok, S::Error> {
        names.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
        struct Names;
        impl<'de> Visitor<'de> for Names {
            type Value = Vec<String>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of names, or one comma-separated string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<String>, E> {
                Ok(v.split(',').map(|n| n.trim().to_string()).filter(|n| !n.is_empty()).collect())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
                let mut names = Vec::new();
                while let Some(name) = seq.next_element::<String>()? {
                    names.push(name);
                }
                Ok(names)
            }
        }
        d.deserialize_any(Names)
    }
}
