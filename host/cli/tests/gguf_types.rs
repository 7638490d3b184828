//! Every block format vauban's kernels run, dequantized by vauban
//! (`vauban_kernels::blocks`) and by llama.cpp's own `gguf` Python package
//! (`gguf.quants.dequantize`, shipped with the converter that
//! `scripts/build-llama-server.sh` keeps), on the same random blocks:
//! the layouts read byte for byte as llama.cpp reads them. Needs the
//! reference environment (numpy) and llama.cpp's folder; skips without
//! them unless CI requires them.

mod common;

use std::process::Command;

use vauban_kernels::Format;
use vauban_kernels::blocks::dequantize_row;

/// Random bytes, with each block's f16 scales (where the format keeps
/// them) finite: a NaN scale dequantizes to NaN on both sides, which
/// compares nothing.
fn blocks(format: Format, n: usize, seed: &mut u64) -> Vec<u8> {
    // xorshift64*: the bytes' only requirement is to cover their range.
    let mut bytes: Vec<u8> = (0..n * format.block_bytes())
        .map(|_| {
            *seed ^= *seed >> 12;
            *seed ^= *seed << 25;
            *seed ^= *seed >> 27;
            (seed.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect();
    for b in bytes.chunks_exact_mut(format.block_bytes()) {
        for &at in format.factor_offsets() {
            // Exponent bits below all-ones: finite.
            b[at + 1] &= 0b1011_1111;
        }
    }
    bytes
}

#[test]
fn every_format_dequantizes_as_llama_cpps_gguf_package_does() {
    let Some(server) = common::llama_server::binary() else {
        return;
    };
    let Some(python) = common::reference::python() else {
        return;
    };
    let gguf_py = server
        .parent()
        .and_then(|p| p.parent())
        .unwrap()
        .join("convert/gguf-py");
    let dir = tempfile::tempdir().unwrap();
    let mut seed = 34u64;
    for format in Format::ALL {
        let n = 64;
        let bytes = blocks(format, n, &mut seed);
        let (input, output) = (dir.path().join("in.bin"), dir.path().join("out.bin"));
        std::fs::write(&input, &bytes).unwrap();
        let code = "import sys, numpy as np; sys.path.insert(0, sys.argv[1]);\
            from gguf.quants import dequantize; from gguf.constants import GGMLQuantizationType as T;\
            data = np.fromfile(sys.argv[3], dtype=np.uint8).reshape(int(sys.argv[4]), -1);\
            dequantize(data, T[sys.argv[2]]).astype(np.float32).tofile(sys.argv[5])";
        let done = Command::new(&python)
            .args(["-c", code])
            .arg(&gguf_py)
            .arg(format.name())
            .arg(&input)
            .arg(n.to_string())
            .arg(&output)
            .output()
            .unwrap();
        assert!(
            done.status.success(),
            "{format}: {}",
            String::from_utf8_lossy(&done.stderr)
        );
        let theirs: Vec<f32> = std::fs::read(&output)
            .unwrap()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let mut ours = vec![0f32; n * format.block_len()];
        dequantize_row(format, &bytes, &mut ours);
        assert_eq!(theirs.len(), ours.len(), "{format}");
        // The same products, maybe in another order (`d·sc·q − dmin·m`):
        // within f32 rounding of the larger term.
        let mut worst = 0f32;
        for (a, b) in ours.iter().zip(&theirs) {
            let scale = a.abs().max(b.abs()).max(f32::MIN_POSITIVE);
            worst = worst.max((a - b).abs() / scale);
        }
        println!(
            "{format}: {} values, max relative |Δ| {worst:e}",
            ours.len()
        );
        assert!(worst < 1e-6, "{format}: max relative |Δ| {worst:e}");
    }
}
