//! Request bodies as the engine must see them: decompressed. A `gzip` or
//! `deflate` body is inflated (never past the size limit, so a small bomb
//! cannot become a large allocation) and forwarded as identity; any other
//! encoding cannot be judged.

use std::io::Read;

use bytes::Bytes;
use hyper::HeaderMap;
use hyper::header::{CONTENT_ENCODING, CONTENT_LENGTH};

/// Decodes `body` by its `Content-Encoding`, at most `limit` bytes out;
/// on success the headers describe the identity body returned.
pub fn decode(headers: &mut HeaderMap, body: Bytes, limit: usize) -> Result<Bytes, String> {
    let encoding = match headers.get(CONTENT_ENCODING).map(|v| v.to_str()) {
        None => return Ok(body),
        Some(Ok(e)) => e.trim().to_ascii_lowercase(),
        Some(Err(_)) => return Err("an unreadable Content-Encoding".to_owned()),
    };
    let reader: Box<dyn Read + '_> = match encoding.as_str() {
        "identity" | "" => return Ok(body),
        "gzip" | "x-gzip" => Box::new(flate2::read::GzDecoder::new(&body[..])),
        "deflate" => Box::new(flate2::read::ZlibDecoder::new(&body[..])),
        other => return Err(format!("a {other}-encoded body")),
    };
    let mut out = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    reader
        .take(cap)
        .read_to_end(&mut out)
        .map_err(|e| format!("a {encoding} body that does not decode ({e})"))?;
    if out.len() > limit {
        return Err(format!("a body over {limit} bytes once decompressed"));
    }
    headers.remove(CONTENT_ENCODING);
    headers.remove(CONTENT_LENGTH);
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use hyper::header::HeaderValue;

    fn gzip(data: &[u8]) -> Bytes {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        enc.write_all(data).unwrap();
        Bytes::from(enc.finish().unwrap())
    }

    fn encoded(e: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_ENCODING, HeaderValue::from_static(e));
        h
    }

    #[test]
    fn gzip_is_inflated_and_forwarded_as_identity() {
        let mut h = encoded("gzip");
        let out = decode(&mut h, gzip(br#"{"card": "4242"}"#), 1024).unwrap();
        assert_eq!(&out[..], br#"{"card": "4242"}"#);
        assert!(h.get(CONTENT_ENCODING).is_none());
    }

    /// Guards the bomb bound: 1 MiB of zeros compresses to about 1 KiB and
    /// must not be inflated past the limit.
    #[test]
    fn inflation_stops_at_the_limit() {
        let bomb = gzip(&vec![0u8; 1 << 20]);
        assert!(bomb.len() < 4096);
        let err = decode(&mut encoded("gzip"), bomb, 64 * 1024).unwrap_err();
        assert!(err.contains("once decompressed"), "{err}");
    }

    #[test]
    fn other_encodings_and_garbage_cannot_be_judged() {
        assert!(
            decode(&mut encoded("br"), Bytes::from_static(b"x"), 10)
                .unwrap_err()
                .contains("br")
        );
        assert!(decode(&mut encoded("gzip"), Bytes::from_static(b"nope"), 10).is_err());
        let plain = decode(&mut HeaderMap::new(), Bytes::from_static(b"{}"), 10).unwrap();
        assert_eq!(&plain[..], b"{}");
    }
}
