#!/bin/sh
# Compiler launcher of the -fsyntax-only programs (BARATO_CHECK_ONLY_UNRUN, cmake/BaratoDev.cmake):
# runs the compile command it is given, then leaves an empty file at the command's -o path, so the
# build tool sees the step done and does not repeat it until a source or header changes.
# usage: syntax_only.sh COMPILER ARG...
if [ $# -eq 0 ]; then echo "usage: syntax_only.sh COMPILER ARG... (a compile command)" >&2; exit 2; fi
"$@" || exit $?
out=
prev=
for arg in "$@"; do
  if [ "$prev" = "-o" ]; then out=$arg; fi
  prev=$arg
done
if [ -n "$out" ]; then : > "$out"; fi
