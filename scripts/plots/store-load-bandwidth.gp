# Host-tier store and load bandwidth against chunk size, next to a memcpy of the same size in the
# same run. Variables (gnuplot -e): data (tables.py store-load), out, term, note.
set terminal @term size 900,560
set output out
set title "Host tier: store and load bandwidth against chunk size, with memcpy of the same bytes"
set xlabel "chunk size (log scale; Llama-3.1-8B holds 128 KiB a token: 32 MiB is 256 tokens)"
set ylabel "GB/s (one core)"
set logscale x 2
set xrange [0.09:180]
set xtics ("128 KiB" 0.125, "512 KiB" 0.5, "2 MiB" 2, "8 MiB" 8, "32 MiB" 32, "128 MiB" 128)
set yrange [0:*]
set offsets 0, 0, graph 0.05, 0
set grid
set key right top
set bmargin 5
set label 1 note at screen 0.5, 0.02 center noenhanced font ",9"
plot data using 1:6 with linespoints linewidth 3 linecolor "black" title "memcpy, same size", \
     data using 1:2 with linespoints linetype 2 linewidth 2 title "store (reserve + copy in)", \
     data using 1:3 with linespoints linetype 3 linewidth 2 title "load (lease + copy out)", \
     data using 1:4 with linespoints linetype 2 dashtype 2 linewidth 2 \
       title "store with its xxh3 checksum", \
     data using 1:5 with linespoints linetype 3 dashtype 2 linewidth 2 \
       title "load with the checksum verified"
