//! Compiles the optional torch shim (rust/shim/torch_shim.cpp) against the headers of the torch
//! installed in the build's Python. Without torch, or with AITUNE_FAST_NO_TORCH_SHIM=1, the crate
//! builds without it and reads tensors through Python only.

use std::process::Command;

const PROBE: &str = r#"
import os, sysconfig
import torch
root = os.path.dirname(torch.__file__)
print(root)
print(torch.__version__)
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(sysconfig.get_paths()["include"])
"#;

fn main() {
    println!("cargo:rerun-if-changed=rust/shim/torch_shim.cpp");
    println!("cargo:rerun-if-env-changed=AITUNE_FAST_NO_TORCH_SHIM");
    println!("cargo:rerun-if-env-changed=PYO3_PYTHON");
    println!("cargo::rustc-check-cfg=cfg(aft_torch_shim)");
    if std::env::var("AITUNE_FAST_NO_TORCH_SHIM").is_ok_and(|v| v == "1") {
        return;
    }
    let python = std::env::var("PYO3_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = match Command::new(&python).args(["-c", PROBE]).output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        _ => {
            println!(
                "cargo:warning=torch not importable by {python}: building without the torch shim"
            );
            return;
        }
    };
    let lines: Vec<&str> = out.lines().collect();
    let [root, version, abi, py_include] = lines[..] else {
        println!("cargo:warning=unexpected torch probe output: building without the torch shim");
        return;
    };
    cc::Build::new()
        .cpp(true)
        .file("rust/shim/torch_shim.cpp")
        .include(format!("{root}/include"))
        .include(format!("{root}/include/torch/csrc/api/include"))
        .include(py_include)
        .define("_GLIBCXX_USE_CXX11_ABI", abi)
        .flag("-std=c++20")
        .flag("-fvisibility=hidden")
        .warnings(false)
        .opt_level(2)
        .compile("aft_torch_shim");
    println!("cargo:rustc-link-search=native={root}/lib");
    println!("cargo:rustc-link-lib=dylib=c10");
    println!("cargo:rustc-link-lib=dylib=torch_cpu");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{root}/lib");
    println!("cargo:rustc-env=AFT_TORCH_VERSION={version}");
    println!("cargo:rustc-cfg=aft_torch_shim");
}
