//! The empty gzip member Go writes where a member ends with no data in it (see
//! `file_logger.rs`, `Writer::end_member`): spelled out, since flate2 encodes an empty stream
//! differently.

/// What Go's `gzip.Writer.Close` writes for a writer that was never written to
/// (compress/gzip/gzip.go, `Writer.Write` and `Close`; compress/flate/deflate.go,
/// `compressor.close`): the 10-byte header (no mtime, XFL 2 for level 9 and 4 for level 1,
/// OS 255), a final empty stored block, and a trailer of CRC-32 0 and size 0. flate2 writes the
/// same header but ends an empty stream with a fixed-Huffman block, so it is spelled out here.
pub(crate) fn empty_gzip_member(level: u32) -> [u8; 23] {
    let xfl = match level {
        9 => 2,
        1 => 4,
        _ => 0,
    };
    [
        0x1f, 0x8b, 8, 0, 0, 0, 0, 0, xfl, 0xff, // header
        0x01, 0x00, 0x00, 0xff, 0xff, // BFINAL stored block, LEN 0, NLEN 0xffff
        0, 0, 0, 0, 0, 0, 0, 0, // CRC-32, ISIZE
    ]
}

#[cfg(test)]
mod tests {
    use super::empty_gzip_member;
    use std::io::Read;

    #[test]
    fn empty_member_is_a_valid_gzip_stream_with_no_data() {
        for level in 1..=9 {
            let bytes = empty_gzip_member(level);
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(&bytes[..])
                .read_to_end(&mut out)
                .unwrap();
            assert!(out.is_empty());
            // The same header flate2 writes for that level (mtime 0, XFL, OS 255).
            let mut enc =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
            std::io::Write::write_all(&mut enc, b"x").unwrap();
            assert_eq!(enc.finish().unwrap()[..10], bytes[..10], "level {level}");
        }
        assert_eq!(empty_gzip_member(9)[8], 2);
        assert_eq!(empty_gzip_member(1)[8], 4);
        assert_eq!(empty_gzip_member(6)[8], 0);
    }
}
