" dsl's files: a network (.net), a schedule (.sched), a machine for the performance model (.platform).
autocmd BufRead,BufNewFile *.net setfiletype dslnet
autocmd BufRead,BufNewFile *.sched setfiletype dslsched
autocmd BufRead,BufNewFile *.platform setfiletype dslplatform
