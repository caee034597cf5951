//! Pillow-exact resizing: values Pillow 13.0.0 computed (`Image.resize` on small generated
//! images), hand-checked cases, and properties any exact Pillow resize keeps.

use nornir_image::{Resample, resize_rgb8};

/// The generated source image: the formula the goldens were computed from.
fn source(w: u32, h: u32) -> Vec<u8> {
    let mut out = Vec::new();
    for y in 0..h {
        for x in 0..w {
            for c in 0..3 {
                out.push(((x * 37 + y * 91 + c * 53 + (x * y) % 7 * 29) % 256) as u8);
            }
        }
    }
    out
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex")).collect()
}

const ALL: [Resample; 6] =
    [Resample::Nearest, Resample::Lanczos, Resample::Bilinear, Resample::Bicubic, Resample::Box, Resample::Hamming];

/// (width, height, new width, new height, Pillow filter, the RGB bytes Pillow 13.0.0 returned).
const GOLDENS: &[(u32, u32, u32, u32, u8, &str)] = &[
    (8, 6, 5, 3, 0, "5b90c5df14496398cda5da0f5e93c811467b093e73366ba0e71c5114497ec7fc31689dd2093e73f4295ecaff34"),
    (8, 6, 5, 3, 1, "4a84687c61786496d2beb6427f446d56948670647d897c759484705d938069a19d766ba1447da5bf2249a2ab68"),
    (8, 6, 5, 3, 2, "4a7f717768816f8fb9ada9507a55745c91806c6c877d7e829c8267658d7c6ea397746c9a52779bb43e569aa26a"),
    (8, 6, 5, 3, 3, "477f6e7b647a6993cab8b1457b4b735a93816b6985847e7a9a836b5e917f6fa69a77689d457aa3bd2d4da1a868"),
    (8, 6, 5, 3, 4, "487d72954a7f6297ccafe4198a3f745b90853f74a98b8075d78c41568b806ea3989e53884176abe4194eafa459"),
    (8, 6, 5, 3, 5, "42777b835e7c6594c8b4bb356f4f7d5d927655729b867f79b0865b5e907479ae92845f934477a7cc2f4da4af69"),
    (
        5,
        4,
        9,
        7,
        0,
        "00356a00356a255a8f255a8f4a7fb46fa4d96fa4d994c9fe94c9fe00356a00356a255a8f255a8f4a7fb46fa4d96fa4d994c9fe94c9fe5b90c55b90c59dd2079dd207df144921568b21568b6398cd6398cd5b90c55b90c59dd2079dd207df144921568b21568b6398cd6398cdb6eb20b6eb20154a7f154a7f74a9ded3083dd3083d679cd1679cd111467b11467b8dc2f78dc2f7093e73baef24baef24366ba0366ba011467b11467b8dc2f78dc2f7093e73baef24baef24366ba0366ba0",
    ),
    (
        5,
        4,
        9,
        7,
        1,
        "002d5300306c10429a1f6abb3590c55da0d084aee497c6fb9ad2ff0e3d9a205d834a87647775647d53885a6bab4c9ece71b5e88dbbef4974df5ea8918ed51ed88205d814496b20731a6f9c4493c3759ed3bae8818dce535997208a7a4fce5f94ab12726a0e63616bab67afdec3f61480b13423527a1571d767a9dec35073d3183e8c6a9953aee644784054867b6294d12f7de71e6a9f8e8d3ecda62f788b822f73c3001778356bb69bd1fc5c87d5002d6261ac1ab1ff3062a4771b49aa",
    ),
    (
        5,
        4,
        9,
        7,
        2,
        "00356a0c417621568b356a9f4a7fb45f94c973a8dd88bdf294c9fe21568b30657c4b80636571737f598e6773a8588dc273a8dd82b7ec558abf6a9f858ec324b17d2dd41c51733f742d62975186bb669bd089be7379ae635f94487d7967aa5f948f457a783b706c77ac659acfaadf267bb0472d627c4075aa6ca1d6a55681c5264b886e9d6499ce4c815a5388806095bf4b80b52f649981835db5993c718786487db211467b3a6fa47fb4e95287bc093e736ba047abe032629777366ba0",
    ),
    (
        5,
        4,
        9,
        7,
        3,
        "002b5e013671184c952968aa3e87bc5d9cd07aaee390c4f99bd0ff16498f265e7e49816367726e7b598e6273ad5395ca75b0e589bdf14f84d566a48f93d315c68014dc14496f2f721c64994b8bc06a9fd49ed37784be5e5a953482795bba5f949a2d747322676775af63a4d8bef31683b8391e537c2b72bd6ca9deb64d7ad3143d886fa05ba5db44794f51857e6498d04280cb256499888a4cc5a52e6f89863a76ba002d783267aa92c7fd568acd01366b6aac30b5fe285e9978275aa6",
    ),
    (
        5,
        4,
        9,
        7,
        4,
        "00356a00356a255a8f255a8f4a7fb46fa4d96fa4d994c9fe94c9fe00356a00356a255a8f255a8f4a7fb46fa4d96fa4d994c9fe94c9fe5b90c55b90c59dd2079dd207df144921568b21568b6398cd6398cdb6eb20b6eb20154a7f154a7f74a9ded3083dd3083d679cd1679cd1b6eb20b6eb20154a7f154a7f74a9ded3083dd3083d679cd1679cd111467b11467b8dc2f78dc2f7093e73baef24baef24366ba0366ba011467b11467b8dc2f78dc2f7093e73baef24baef24366ba0366ba0",
    ),
    (
        5,
        4,
        9,
        7,
        5,
        "00356a063b7024598e33689d4a7fb46196cb70a5da8ec3f894c9fe13487d1a4f7b3c71734e6f8468699e6284b96095ca83b8ed8abff45a8fc4659aa59bd00bb58b21de154a683e7323588d588dc26398cd89be7381b66b5a8f44777c61aa5f948c41767a31666988bd659acfb5ea219acf31184d7f386da273a8ddb04579d20c3f7983b8679cd13368683e737c73a8dd558abf1f548983984cbdbf2b5581944075aa11467b265b908bc0f55c91c6093e7378ad41b8ed264c818b366ba0",
    ),
    (
        7,
        9,
        3,
        9,
        0,
        "255a8f6fa4d9b9ee239dd20721568ba5da0f154a7fd3083dc6fb308dc2f7baef24e71c51053a6f6ca1d6d3083d7db2e75388bdf4295ef52a5f053a6f154a7fa2d70cec2156366ba01a4f849ed30822578c",
    ),
    (
        7,
        9,
        3,
        9,
        1,
        "1849836fb3d9c6965a978d556c657cab8c5462976c98629779ae6e417aaf6f955f975b905956887854989d72439cd2a24075b9bf1f50b43c715c376c034e83a6db64a16c473267b168497e8f8853675d92",
    ),
    (
        7,
        9,
        3,
        9,
        2,
        "20558a6fa4cabe985f9492596c657cae884f63987197638978ad744479ae71976392598e565489786297a0684193c8a15278adba265bab3c71503a6f164b809dd262a16c563b70a56c467b8f8853626095",
    ),
    (
        7,
        9,
        3,
        9,
        3,
        "1b50866facd5c3965b9492576b627fae8a4f64996d98629377ac71447aaf6d9660965b9056558a795c99a06d4098cea14677b4bf2156ae3c7156386d0e4c81a1d664a26b4e376caa6a467b928952626095",
    ),
    (
        7,
        9,
        3,
        9,
        4,
        "13487d6fa4d9cc81367cb16676568bc67b30669b508f6fa476ab604f84b9538868a55a8f396ea37e5d92ba6f24a2d78c4176abea1f548c41765a3a6f194e8390c57a977656497eb3792e639e7e5d4378ad",
    ),
    (
        7,
        9,
        3,
        9,
        5,
        "1c51866fa4d6c2954d8ca158605988b689405f9467a154867cb1694d82b771a3579e558a465b90796ea3ad643797cc9f497bb0ce2459a53c71443a6f174c8199ce65ad60563f74a96b3e739b944753689d",
    ),
    (
        9,
        40,
        7,
        5,
        0,
        "6ca1d6053a6f6ca1d63a6fa4d3083d6fa4d9083d724479aefa2f64d0053a86bbf071a6db477cb1fd32671c5186ef2459ff3469073c710f44791f5489f2275cf4295e194e836398cd88bdf2ade217f72c611c5186cc01360e437892c7fcd4093e164b80cf043911467b",
    ),
    (
        9,
        40,
        7,
        5,
        1,
        "618c877d75868572805b6d87956760747e84688a8b897e83847a9a8e67878292927b89849175727d83977a8381897085966a7a64697f7c636d7c7c786d81897b7c808471a2938c7f7d9b92838b85856d807e7f9c7974859d7e86967787765a66686874757082797c8d",
    ),
    (
        9,
        40,
        7,
        5,
        2,
        "6889867a7488827380646f8a946d62787e7e6a878b877d868478958d6a88848c8e7b85838a77797c80917d82838c7386946f7b67677e7e68707c7b7a738089807b8183749b8c888480939385897f85727f7b7c9a7d7485967d869577867a5e69666b7b74708379798c",
    ),
    (
        9,
        40,
        7,
        5,
        3,
        "658c867b748783717f5c6c8c976a5e757f81688a8b897c848279988d68888692907a89868f75757b81947a82828c7184966d7961637d7d626d7a7c7a6f81887e7b7f8272a08e8c817f9b95858d8086707f7b7d9e7b73859b7e869776887959646468797570837a7b8d",
    ),
    (
        9,
        40,
        7,
        5,
        4,
        "5f948983787d7a6f843f74a9a4794e767b8073887d976c8180759a7d7287a59a8f6ea398986d726e83986f84798d72879f746952477c7f54696f84796a7f94877c717b70a5899e7379aea38fa479856a7f667bb07f74899b80858c6196865b50596e837b708581768b",
    ),
    (
        9,
        40,
        7,
        5,
        5,
        "6891837774877f747f4d6d9ba16b5876847d6a868b8e788381799a8d6789959e907693928f757879809876858391738299707550557b7c5a6c767e7d707e88877b747d72a28790867ea1a78a9a7d8a717b747aa7797186987c8395708c7e505b5a66807470857a7988",
    ),
    (6, 5, 6, 2, 0, "5b90c59dd207df144921568b6398cda5da0f11467b8dc2f7093e73baef24366ba0e71c51"),
    (6, 5, 6, 2, 1, "4e8377588d598762976c5f8a76abe0b4ef1e5f9488457aa5704176a397634075aad84942"),
    (6, 5, 6, 2, 2, "4f847f578c588e5a8f69648d71a6dbb6df20578c87477ca66b4378a09b674479aed65140"),
    (6, 5, 6, 2, 3, "4f847b578c578c5e9369618e75aadfb4ea1e5b9087457aa76d4277a39b654176abd84942"),
    (6, 5, 6, 2, 4, "5b9070487d5c8a699e76568b75aadfb7ec213f74a9497eb36e235893c87d386da2dd1247"),
    (6, 5, 6, 2, 5, "4b80895c914c9853885b649874a9deb2e51c4d828b4a7fb2623d72a2ac664075aada3c44"),
];

#[test]
fn matches_pillow_goldens() {
    for &(w, h, nw, nh, filter, expected) in GOLDENS {
        let filter = Resample::from_pillow(filter).expect("filter");
        let out = resize_rgb8(&source(w, h), w, h, nw, nh, filter).expect("resize");
        assert_eq!(out, hex(expected), "{w}x{h} -> {nw}x{nh} with {}", filter.name());
    }
}

#[test]
fn same_size_is_a_copy() {
    let src = source(13, 7);
    for filter in ALL {
        assert_eq!(resize_rgb8(&src, 13, 7, 13, 7, filter).expect("resize"), src);
    }
}

#[test]
fn a_constant_image_stays_constant() {
    for (w, h, nw, nh) in [(10, 10, 3, 4), (3, 4, 17, 11), (1, 1, 9, 5), (50, 2, 7, 1), (2, 50, 1, 7)] {
        for value in [0u8, 1, 127, 254, 255] {
            let src = vec![value; (w * h * 3) as usize];
            for filter in ALL {
                let out = resize_rgb8(&src, w, h, nw, nh, filter).expect("resize");
                assert!(out.iter().all(|&v| v == value), "{w}x{h}->{nw}x{nh} {} of {value}", filter.name());
            }
        }
    }
}

#[test]
fn box_halving_averages_pairs_rounding_down_half() {
    // One row: 0, 100, 200, 50 (gray). Box over pairs: (0+100)/2 = 50, (200+50)/2 = 125.
    let src: Vec<u8> = [0u8, 100, 200, 50].iter().flat_map(|&v| [v, v, v]).collect();
    let out = resize_rgb8(&src, 4, 1, 2, 1, Resample::Box).expect("resize");
    assert_eq!(out, vec![50, 50, 50, 125, 125, 125]);
    // Pillow adds half before the shift: 1 and 2 average to 1.5, which becomes 2.
    let src: Vec<u8> = [1u8, 2].iter().flat_map(|&v| [v, v, v]).collect();
    assert_eq!(resize_rgb8(&src, 2, 1, 1, 1, Resample::Box).expect("resize"), vec![2, 2, 2]);
}

#[test]
fn nearest_takes_the_pixel_each_step_lands_in() {
    let src: Vec<u8> = [10u8, 20, 30, 40].iter().flat_map(|&v| [v, v, v]).collect();
    // Down: positions 1.0 and 3.0.
    assert_eq!(resize_rgb8(&src, 4, 1, 2, 1, Resample::Nearest).expect("resize"), vec![20, 20, 20, 40, 40, 40]);
    // Up: positions 0.25, 0.75, 1.25, ... each taken down.
    let two = &src[..6];
    let out = resize_rgb8(two, 2, 1, 4, 1, Resample::Nearest).expect("resize");
    assert_eq!(out, [10u8, 10, 20, 20].iter().flat_map(|&v| [v, v, v]).collect::<Vec<_>>());
}

#[test]
fn mirroring_commutes_with_resizing() {
    let (w, h, nw, nh) = (11, 6, 4, 9);
    let src = source(w, h);
    let mirror = |img: &[u8], w: u32| -> Vec<u8> {
        img.chunks(w as usize * 3).flat_map(|row| row.chunks(3).rev().flatten().copied().collect::<Vec<_>>()).collect()
    };
    // BOX's window (-0.5, 0.5] is not symmetric, and NEAREST truncates: both lean one way.
    for filter in [Resample::Lanczos, Resample::Bilinear, Resample::Bicubic, Resample::Hamming] {
        let a = mirror(&resize_rgb8(&src, w, h, nw, nh, filter).expect("resize"), nw);
        let b = resize_rgb8(&mirror(&src, w), w, h, nw, nh, filter).expect("resize");
        assert_eq!(a, b, "{}", filter.name());
    }
}

#[test]
fn huge_ratios_and_single_pixels() {
    for (w, h, nw, nh) in [(1, 1, 1, 300), (300, 1, 1, 1), (1, 400, 3, 2), (1000, 2, 1, 1), (2, 3, 1, 1)] {
        let src = source(w, h);
        for filter in ALL {
            let out = resize_rgb8(&src, w, h, nw, nh, filter).expect("resize");
            assert_eq!(out.len(), (nw * nh * 3) as usize);
        }
    }
}

#[test]
fn wrong_sizes_are_errors() {
    assert!(resize_rgb8(&[0; 5], 1, 2, 1, 1, Resample::Bicubic).is_err());
    assert!(resize_rgb8(&[], 0, 0, 1, 1, Resample::Bicubic).is_err());
    assert!(resize_rgb8(&[0; 3], 1, 1, 0, 4, Resample::Bicubic).is_err());
    assert!(resize_rgb8(&[0; 3], 1, 1, 4, 0, Resample::Nearest).is_err());
}

#[test]
fn filters_are_numbered_as_pillow_numbers_them() {
    let names: Vec<_> = (0..=5).map(|c| Resample::from_pillow(c).expect("filter").name()).collect();
    assert_eq!(names, ["NEAREST", "LANCZOS", "BILINEAR", "BICUBIC", "BOX", "HAMMING"]);
    assert_eq!(Resample::from_pillow(6), None);
}
