" Vim syntax file
" Language: dsl schedule (.sched): grammar/include/dsl/grammar/sched.hpp, docs/language.md
" tests/editors.py checks it against every .sched file of stdlib/ and samples/, and that every setting of
" scheduler/src/apply_schedule.cpp is below.
if exists('b:current_syntax')
  finish
endif

syn keyword dslschedEntry default layer block nextgroup=dslschedPattern skipwhite skipnl
syn match dslschedPattern '[[:alnum:]_.*]\+' contained
" Values before settings: of two matches at one place the later wins, and `batch` is both.
syn match dslschedValue '\<\%(on\|off\|batch\|spatial\|local\|float32\|bfloat16\|float16\)\>'
syn match dslschedSetting '\<\%(procs\|platform\|batch\|N\|C\|F\|D\|H\|W\|overlap\|bn\|recompute\|precision\)\ze\s*='
syn match dslschedOpen '?'
syn match dslschedNumber '\<\d\+\>'
syn match dslschedOperator '='
syn region dslschedString start=+"+ end=+"+ oneline
syn match dslschedComment '#.*$' contains=@Spell
" A character that starts no token of the language.
syn match dslschedError '[^[:space:][:alnum:]_#"?=.*]'

hi def link dslschedEntry Keyword
hi def link dslschedPattern Identifier
hi def link dslschedSetting Type
hi def link dslschedValue Constant
hi def link dslschedOpen Special
hi def link dslschedNumber Number
hi def link dslschedOperator Operator
hi def link dslschedString String
hi def link dslschedComment Comment
hi def link dslschedError Error

let b:current_syntax = 'dslsched'
