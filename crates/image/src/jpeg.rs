//! JPEG through libjpeg-turbo's decoder (as built by the `mozjpeg` crate), the decoder Pillow
//! uses, with its defaults (ISLOW IDCT, fancy upsampling): the same pixels, bit for bit. Pillow
//! opens 1 component as L, 3 as RGB and 4 as CMYK with Adobe's inverted polarity ("CMYK;I");
//! a file that ends before its image does is refused, as Pillow refuses it.

use std::io::{BufRead, Read};
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::error::ImageError;
use crate::limits::ImageLimits;
use crate::pixels::{Opened, Pixels, require_rgb};

/// More scans than any real progressive JPEG has (they have about ten); each costs a pass over
/// the image, so a file of thousands of tiny scans is refused before decoding.
const MAX_SCANS: usize = 1000;

/// A JPEG decoded in the mode Pillow opens it in.
pub(crate) fn decode(bytes: &[u8], limits: &ImageLimits, convert_rgb: bool) -> Result<Opened, ImageError> {
    let scans = bytes.windows(2).filter(|w| w == &[0xFF, 0xDA]).count();
    if scans > MAX_SCANS {
        return Err(ImageError::decode("JPEG", format!("it has {scans} scans, more than {MAX_SCANS}")));
    }
    // libjpeg reports a fatal error by unwinding out of its C code (mozjpeg's error manager);
    // it is caught here and becomes an error. Warnings are silenced, as Pillow silences them.
    match catch_unwind(AssertUnwindSafe(|| decode_inner(bytes, limits, convert_rgb))) {
        Ok(result) => result,
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("libjpeg failed");
            Err(ImageError::decode("JPEG", message))
        }
    }
}

fn decode_inner(bytes: &[u8], limits: &ImageLimits, convert_rgb: bool) -> Result<Opened, ImageError> {
    let err = |e: std::io::Error| ImageError::decode("JPEG", e);
    let decompress = mozjpeg::Decompress::new_reader(Watched { rest: bytes, ran_out: false }).map_err(err)?;
    let (width, height) = (decompress.width(), decompress.height());
    limits.check_pixels("JPEG", width as u64, height as u64)?;
    let (mode, out_space, per_pixel) = match decompress.components().len() {
        1 => ("L", mozjpeg::ColorSpace::JCS_GRAYSCALE, 1),
        3 => ("RGB", mozjpeg::ColorSpace::JCS_RGB, 3),
        4 => ("CMYK", mozjpeg::ColorSpace::JCS_CMYK, 4),
        n => return Err(ImageError::decode("JPEG", format!("it has {n} components; Pillow reads 1, 3 or 4"))),
    };
    require_rgb(mode, convert_rgb)?;
    let mut started = decompress.to_colorspace(out_space).map_err(err)?;
    let samples: Vec<u8> = started.read_scanlines().map_err(err)?;
    let reader = started.finish_into_inner().map_err(err)?;
    if reader.ran_out {
        return Err(ImageError::decode("JPEG", "the file ends before the image does (truncated)"));
    }
    if samples.len() != width * height * per_pixel {
        return Err(ImageError::decode("JPEG", "the decoder returned fewer rows than the header declares"));
    }
    let pixels = match mode {
        "L" => Pixels::L(samples),
        "RGB" => Pixels::Rgb(samples),
        // "CMYK;I": Adobe writes the samples inverted; Pillow holds them turned back.
        _ => Pixels::Cmyk(samples.into_iter().map(|v| 255 - v).collect()),
    };
    Ok(Opened { width: width as u32, height: height as u32, pixels })
}

/// The file's bytes, noting whether the decoder asked for more than there are.
struct Watched<'a> {
    rest: &'a [u8],
    ran_out: bool,
}

impl Read for Watched<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.rest.read(buf)?;
        self.ran_out |= n == 0 && !buf.is_empty();
        Ok(n)
    }
}

impl BufRead for Watched<'_> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.ran_out |= self.rest.is_empty();
        Ok(self.rest)
    }

    fn consume(&mut self, amount: usize) {
        self.rest = self.rest.get(amount..).unwrap_or_default();
    }
}
