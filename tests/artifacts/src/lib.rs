//! The workspace's plugins as WebAssembly components, built by this
//! crate's build script when the tests are compiled (the pattern of
//! wasmtime's `test-programs/artifacts`): a test names a component by
//! constant, and no test binary runs cargo or searches for files.
//!
//! ```
//! let refusal = vauban_test_artifacts::VAUBAN_PLUGIN_REFUSAL;
//! assert!(refusal.ends_with("vauban_plugin_refusal.wasm"));
//! ```

include!(concat!(env!("OUT_DIR"), "/components.rs"));

/// The component built from `package` (`vauban-plugin-refusal`,
/// `vauban-test-evil`); `None` for a package this crate does not build.
pub fn component(package: &str) -> Option<&'static str> {
    ALL.iter()
        .find(|(p, _)| *p == package)
        .map(|(_, path)| *path)
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_component_is_a_webassembly_component_on_disk() {
        for (package, path) in super::ALL {
            let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{package}: {path}: {e}"));
            // The component binary format: `\0asm`, then layer 1 (a core
            // module has layer 0).
            assert_eq!(&bytes[..4], b"\0asm", "{package}");
            assert_eq!(&bytes[6..8], &[1, 0], "{package} is not a component");
        }
        assert!(super::component("vauban-plugin-refusal").is_some());
        assert!(super::component("no-such-plugin").is_none());
    }
}
