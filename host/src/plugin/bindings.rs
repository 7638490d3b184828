//! Host-side bindings of `wit/plugin.wit`, one module per world.

/// The scorer world: imports `tensors` (host-owned tensor handles).
pub mod scorer {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "scorer-plugin",
        imports: { default: trappable },
        with: { "vauban:plugin/tensors.tensor": crate::plugin::tensors::TensorHandle },
    });
}

pub mod policy {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "intervention-policy-plugin",
    });
}

pub mod claims {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "claim-mapper-plugin",
    });
}
