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
        s.trim().parse().map(Some).map_err(|e: String| D::Error::custom(format!("{e}, or auto")))
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
