" Vim syntax file
" Language: dsl network (.net): grammar/include/dsl/grammar/net.hpp, docs/language.md
" tests/editors.py checks it against every .net file of stdlib/ and samples/, and that every layer kind of
" frontend/src/layer_kinds.cpp is below.
if exists('b:current_syntax')
  finish
endif

syn keyword dslnetKeyword import input label block repeat from train
syn keyword dslnetType float int
syn keyword dslnetBoolean true false
syn keyword dslnetBatch N
syn keyword dslnetLayerKind conv batchnorm groupnorm dropout relu leaky_relu sigmoid tanh gelu
syn keyword dslnetLayerKind maxpool avgpool global_avgpool fc add concat softmax_cross_entropy
syn keyword dslnetLayerKind pixel_cross_entropy upsample deconv mse l1 bce_with_logits
syn keyword dslnetOptimizer sgd adam adamw
syn keyword dslnetSchedule cosine step
syn keyword dslnetChoice zeros periodic nearest bilinear trilinear
syn match dslnetStart '\<start\ze\s*='
syn match dslnetNumber '\<\d\+\%(\.\d*\%([eE][+-]\=\d\+\)\=\|[eE][+-]\=\d\+\)\='
syn match dslnetOperator '[-+*/=]'
syn region dslnetString start=+"+ end=+"+ oneline
syn match dslnetComment '#.*$' contains=@Spell
" A character that starts no token of the language.
syn match dslnetError '[^[:space:][:alnum:]_#"()\[\]{},.=+*/-]'

hi def link dslnetKeyword Keyword
hi def link dslnetType Type
hi def link dslnetBoolean Boolean
hi def link dslnetBatch Constant
hi def link dslnetLayerKind Function
hi def link dslnetOptimizer Function
hi def link dslnetSchedule Function
hi def link dslnetChoice Constant
hi def link dslnetStart Keyword
hi def link dslnetNumber Number
hi def link dslnetOperator Operator
hi def link dslnetString String
hi def link dslnetComment Comment
hi def link dslnetError Error

let b:current_syntax = 'dslnet'
