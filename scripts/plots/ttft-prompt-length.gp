# Time to first token against prompt length, vLLM alone and vLLM + Strata (a host-tier hit, and
# the first sight of the prompt, which stores it). Variables (gnuplot -e): data (tables.py
# ttft), out, term, note.
set terminal @term size 900,560
set output out
set title "Time to first token against prompt length: vLLM alone and with Strata (SmolLM2-135M)"
set xlabel "prompt length (tokens)"
set ylabel "time to first token (s)"
set xrange [0:*]
set yrange [0:*]
set grid
set key left top
set bmargin 5
set label 1 note at screen 0.5, 0.02 center noenhanced font ",9"
plot data using 1:2 with linespoints linewidth 2 title "vLLM alone (prefill computes the prompt)", \
     data using 1:3 with linespoints linewidth 2 \
       title "vLLM + Strata, first sight (computed, then stored)", \
     data using 1:4 with linespoints linewidth 2 \
       title "vLLM + Strata, host-tier hit (the document loaded)"
