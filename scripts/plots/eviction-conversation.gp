# Prefix-hit ratio against host-tier capacity for each eviction policy on the production
# conversation trace, with Belady's bound. Variables (gnuplot -e): data (tables.py eviction),
# out (the PNG), term (the terminal), note (where and when it was measured).
set terminal @term size 900,560
set output out
set title "Eviction policies on the conversation trace: prefix-hit ratio against capacity"
set xlabel "host-tier capacity (% of the trace's unique blocks, log scale)"
set ylabel "prefix-hit ratio (blocks served from cache / all blocks)"
set logscale x
set xrange [0.8:70]
set xtics (1, 2, 5, 10, 25, 50)
set yrange [0:*]
set grid
set key right bottom opaque box
set bmargin 5
set label 1 note at screen 0.5, 0.02 center noenhanced font ",9"
# Columns: capacity, one per policy, Belady.
set datafile columnheaders
stats data nooutput
policies = STATS_columns - 2
# A dash pattern each, so that a policy drawn over an equal one (prefix-lru over lru) leaves it
# visible.
plot for [i = 2:policies + 1] data using 1:i with linespoints linetype i - 1 dashtype i - 1 \
       linewidth 2 title columnheader(i), \
     data using 1:(column(policies + 2)) with lines dashtype 2 linewidth 2 linecolor "black" \
       title "Belady (block hits, an upper bound)"
