//! An HdrHistogram as text: V2-deflate serialized, then base64 (the form `hlog` lines, raw
//! loads and target metrics files carry histograms in).

use base64::Engine as _;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;

/// The histogram as base64 text.
pub fn encode(hist: &Histogram<u64>) -> String {
    let mut bytes = Vec::new();
    // Serializing into a Vec cannot fail for a valid histogram.
    let _ = V2DeflateSerializer::new().serialize(hist, &mut bytes);
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A histogram text that cannot be read back.
#[derive(Debug, thiserror::Error)]
pub enum HistTextError {
    /// Not base64.
    #[error("bad base64 histogram: {0}")]
    Base64(#[from] base64::DecodeError),
    /// Base64, but not a V2-deflate histogram.
    #[error("bad histogram: {0:?}")]
    Histogram(hdrhistogram::serialization::DeserializeError),
}

/// The histogram `encode` wrote, auto-resizing (so histograms of wider range add to it).
pub fn decode(text: &str) -> Result<Histogram<u64>, HistTextError> {
    let bytes = base64::engine::general_purpose::STANDARD.decode(text)?;
    let mut hist: Histogram<u64> = Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(HistTextError::Histogram)?;
    hist.auto(true);
    Ok(hist)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut h = Histogram::<u64>::new(3).unwrap();
        h.record_n(4_200, 7).unwrap();
        let back = decode(&encode(&h)).unwrap();
        assert_eq!(back.len(), 7);
        assert_eq!(back.value_at_quantile(0.5), h.value_at_quantile(0.5));
        assert!(decode("not base64!").is_err());
    }
}
