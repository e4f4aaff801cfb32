// Our implementation of the types Kubeless Go functions import, under the import path
// those functions already use. `kubeless-runtime compile` points the function's module at
// this folder with a `replace` directive, so no registry is needed.
module github.com/kubeless/kubeless

go 1.19
