//! The Java half of `compile`: resolve pom.xml dependencies, then javac.
use crate::cli::CompileArgs;
use crate::compile::{CompileError, Compiled};

pub(crate) fn compile_java(args: &CompileArgs) -> Result<Compiled, CompileError> {
    Err(CompileError::UnknownRuntime(args.runtime.clone()))
}
