//! `--device cuda` without a usable GPU fails with a message that says why and
//! what to do (in the CPU build: rebuild with the feature, or use the CPU).

use trainer::device::DeviceKind;

#[test]
fn cuda_unavailable_says_why_and_suggests_the_cpu() {
    let Err(err) = DeviceKind::Cuda.open() else {
        return; // a CUDA build on a machine with a GPU: nothing to check
    };
    let msg = err.to_string();
    assert!(msg.starts_with("--device cuda: "), "{msg}");
    assert!(msg.contains("--device cpu"), "{msg}");
    if cfg!(feature = "cuda") {
        assert!(msg.contains("no usable CUDA GPU"), "{msg}");
    } else {
        assert!(msg.contains("built without CUDA support") && msg.contains("--features cuda"), "{msg}");
    }
}

#[test]
fn the_cpu_always_opens() {
    assert!(DeviceKind::Cpu.open().is_ok());
}
