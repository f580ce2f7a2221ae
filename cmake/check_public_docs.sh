#!/usr/bin/env bash
# Fails when a public class or struct under an include directory has no `///` comment saying what
# it is. Public = defined (not only declared) outside a `namespace detail { … }  // namespace detail`
# block and not nested in a class's private section. The comment is the `///` line right above the
# definition (template heads, requires-clauses and attributes in between are skipped).
# Usage: check_public_docs.sh <include-dir> (ctest: public_docs)
set -euo pipefail
root=${1:?usage: check_public_docs.sh <include-dir>}
if [ ! -d "$root" ]; then echo "public_docs: FAILED: $root is not a directory"; exit 1; fi
headers=$(find "$root" -name '*.hpp' | wc -l)
if [ "$headers" -eq 0 ]; then echo "public_docs: FAILED: no .hpp headers under $root"; exit 1; fi
status=0
while IFS= read -r -d '' f; do
  awk -v file="$f" '
    BEGIN { priv = -1 }
    function indent(s) { match(s, /^ */); return RLENGTH }
    /^[[:space:]]*namespace ([A-Za-z_:]*::)?detail[[:space:]]*\{/ { depth++ }
    /^[[:space:]]*\}[[:space:]]*\/\/[[:space:]]*namespace ([A-Za-z_:]*::)?detail/ { if (depth > 0) depth-- }
    /^[[:space:]]*private:/ { priv = indent($0) }
    /^[[:space:]]*(public|protected):/ { if (indent($0) == priv) priv = -1 }
    /^[[:space:]]*\};/ { if (priv >= 0 && indent($0) < priv) priv = -1 }
    {
      line = $0
      hidden = depth > 0 || (priv >= 0 && indent(line) > priv)
      if (!hidden && line ~ /^[[:space:]]*(class|struct)[[:space:]]+[A-Za-z_][A-Za-z_0-9]*[[:space:]]*(final[[:space:]]*)?(:[^:]|\{|$)/ &&
          line !~ /;[[:space:]]*$/ && !documented) {
        name = line; sub(/^[[:space:]]*(class|struct)[[:space:]]+/, "", name); sub(/[^A-Za-z_0-9].*$/, "", name)
        printf "%s:%d: public %s has no /// comment\n", file, NR, name
        bad++
      }
      if (line ~ /^[[:space:]]*\/\/\//) documented = 1
      else if (line ~ /^[[:space:]]*(template[[:space:]]*<|requires[[:space:]]|\[\[)/ || line ~ /^[[:space:]]*\/\/[^\/]/) { }
      else documented = 0
    }
    END { exit bad > 0 ? 1 : 0 }
  ' "$f" || status=1
done < <(find "$root" -name '*.hpp' -print0 | sort -z)
if [ "$status" -ne 0 ]; then
  echo "public_docs: FAILED: undocumented public classes (listed above)"
  exit 1
fi
echo "public_docs: every public class and struct in the $headers headers under $root has a /// comment"
