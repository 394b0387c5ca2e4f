# Extracts the usage examples from a public header's comments into C that
# tests/header_examples/<name>.c compiles and runs, so that an example cannot
# go stale. Run by the build (cmake/DuetTests.cmake):
#   awk -v header=/abs/include/duet/nn.h -v out=nn_h_examples.inc \
#       -f header-examples.awk /abs/include/duet/nn.h
#
# An example is a comment line " * Usage...:" followed by lines indented by
# three spaces (" *   code") and blank comment lines (" *"); the first other
# line ends it. Example k is compiled where the harness writes
#   #define DUET_EXAMPLE k
#   #include "nn_h_examples.inc"
# inside a function returning int (DUET_TRY returns its status); the harness
# declares the variables the example uses but does not create. #line keeps
# compiler messages pointing at the header's own lines.
function p(s) { print s > out }
function flush_blank() { while (blank > 0) { p(""); blank-- } }
BEGIN { n = 0; in_ex = 0; blank = 0
        p("/* Generated from " header " by cmake/header-examples.awk. Do not edit. */") }
{
    if (in_ex) {
        if ($0 ~ /^ \*$/) { if (started) blank++; next }
        if ($0 ~ /^ \*   /) {
            if (!started) { p("#line " NR " \"" header "\""); started = 1 }
            flush_blank()
            p(substr($0, 6))
            next
        }
        in_ex = 0; blank = 0
    }
    if ($0 ~ /^ \* Usage.*:$/) {
        n++
        p((n == 1 ? "#if" : "#elif") " DUET_EXAMPLE == " n)
        in_ex = 1; started = 0
    }
}
END {
    if (n == 0) {
        p("#error \"" header " has no usage example (a comment line ' * Usage...:')\"")
        exit
    }
    p("#else")
    p("#error \"" header " has " n " usage example(s): DUET_EXAMPLE must be 1.." n "\"")
    p("#endif")
}
