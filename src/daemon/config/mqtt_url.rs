//! The `[mqtt] url` format, shared by validation and the publisher.

#[derive(Debug, thiserror::Error)]
pub enum MqttError {
    #[error("mqtt.url {0}: expected mqtt://HOST[:PORT] (TLS is not supported; use a local broker or a TLS-terminating bridge)")]
    Url(String),
}

/// The broker address of `mqtt://host[:port]` (default port 1883).
pub fn parse_mqtt_url(url: &str) -> Result<(String, u16), MqttError> {
    let bad = || MqttError::Url(url.to_string());
    let rest = url.strip_prefix("mqtt://").ok_or_else(bad)?;
    let rest = rest.trim_end_matches('/');
    if rest.is_empty() || rest.contains('/') || rest.contains('@') {
        return Err(bad());
    }
    match rest.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() => Ok((host.trim_matches(['[', ']']).to_string(), port.parse().map_err(|_| bad())?)),
        Some(_) => Err(bad()),
        None => Ok((rest.to_string(), 1883)),
    }
}
