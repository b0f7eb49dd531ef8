//! Reading the native stack: the unwinder and the loaded objects it walks through.

#[cfg(target_arch = "x86_64")]
mod eval_probe;
pub(crate) mod loaded_modules;
mod module_sections;
pub(crate) mod native_stacks;
#[cfg(target_arch = "x86_64")]
mod registers;
mod rule_ways;
mod stack_top;
