" Vim syntax file
" Language: dsl platform (.platform): grammar/include/dsl/grammar/platform.hpp, docs/language.md
" tests/editors.py checks it against every .platform file of stdlib/ and samples/, and that every setting
" of scheduler/src/platform.cpp is below.
if exists('b:current_syntax')
  finish
endif

syn keyword dslplatformTime time nextgroup=dslplatformKernel skipwhite
syn match dslplatformKernel '\h\w*\%(\.\h\w*\)*' contained
syn keyword dslplatformSetting device procs_per_node nodes memory flops efficiency memory_bandwidth
syn keyword dslplatformSetting kernel_latency compute_units workspace latency bandwidth node_latency
syn keyword dslplatformSetting node_bandwidth bfloat16_flops float16_flops io_bandwidth
syn keyword dslplatformValue cpu gpu
syn match dslplatformNumber '\<\d\+\%(\.\d*\%([eE][+-]\=\d\+\)\=\|[eE][+-]\=\d\+\)\=' nextgroup=dslplatformUnit skipwhite
syn match dslplatformUnit '\a\+\%(/\a\+\)\=\>' contained
syn match dslplatformDims '\<\d\+\%(x\d\+\)\+\>'
syn match dslplatformOperator '='
syn match dslplatformComment '#.*$' contains=@Spell
" A character that starts no token of the language.
syn match dslplatformError '[^[:space:][:alnum:]_#=./]'

hi def link dslplatformTime Keyword
hi def link dslplatformKernel Function
hi def link dslplatformSetting Type
hi def link dslplatformValue Constant
hi def link dslplatformNumber Number
hi def link dslplatformUnit Special
hi def link dslplatformDims Number
hi def link dslplatformOperator Operator
hi def link dslplatformComment Comment
hi def link dslplatformError Error

let b:current_syntax = 'dslplatform'
