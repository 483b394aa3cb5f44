# The distribution of a 128-chunk chain lookup in the controller's cluster index (100 instances
# x 1M chunks), alone and with ingest running on the other core, next to the same run's floor
# (128 random cache-line reads over memory of the index's size). The y axis counts nines, so the
# tail has room. Variables (gnuplot -e): data (tables.py lookup), out, term, note.
set terminal @term size 900,560
set output out
set title "Cluster-index lookup of a 128-chunk chain: latency distribution"
set xlabel "latency (microseconds, log scale)"
set ylabel "percentile"
set logscale x
set ytics ("0%%" 0, "50%%" log10(2), "90%%" 1, "99%%" 2, "99.9%%" 3)
set yrange [0:3.1]
set grid
set key right bottom
set bmargin 5
set label 1 note at screen 0.5, 0.02 center noenhanced font ",9"
# Percentile q at -log10(1 - q) (90% at 1, 99% at 2, ...); the maximum (q = 1) left out.
nines(q) = q < 1 ? -log10(1 - q) : 1/0
below_max(us) = $1 < 1 ? us : 1/0
plot data using (below_max($3)):(nines($1)) with lines linewidth 2 title "lookup, alone", \
     data using (below_max($4)):(nines($1)) with lines linewidth 2 \
       title "lookup, ingest running on the other core", \
     data using (below_max($2)):(nines($1)) with lines dashtype 2 linewidth 2 linecolor "black" \
       title "floor: 128 random cache-line reads"
