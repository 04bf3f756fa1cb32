#!/bin/sh
# models/kjv_corpus.sh OUT: the King James Bible as plain text, one verse a line,
# from Debian's bible-kjv package (the text is public domain: its copyright
# expired; see /usr/share/doc/bible-kjv-text/copyright). The package stores the
# text compressed in its own format, so its `bible` program prints it; chapter
# headings and verse numbers are dropped.
set -eu
out=${1:?usage: models/kjv_corpus.sh OUT}
command -v bible >/dev/null || { echo "kjv_corpus.sh: install bible-kjv (apt-get install bible-kjv)" >&2; exit 1; }
bible -l100000 Gen1:1-Rev22:21 | sed -n 's/^ *[0-9][0-9]* //p' > "$out"
