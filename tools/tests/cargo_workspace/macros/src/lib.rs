//! A proc-macro member: `rustc_bootstrap!()` expands to the RUSTC_BOOTSTRAP
//! this crate's rustc saw, as `Some("1")` or `None` in a string literal.

use proc_macro::TokenStream;

#[inline(never)]
fn macro_work() -> String {
    format!("{:?}", format!("{:?}", option_env!("RUSTC_BOOTSTRAP")))
}

/// The RUSTC_BOOTSTRAP of this crate's rustc, as a string literal.
#[proc_macro]
pub fn rustc_bootstrap(_input: TokenStream) -> TokenStream {
    macro_work().parse().unwrap()
}
