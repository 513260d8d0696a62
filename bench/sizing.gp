# bench/sizing.gp: docs/sizing.png from the data files bench/sizing writes.
# Not meant to be run by hand: bench/sizing (`make sizing`) calls
#   gnuplot -e "out='PNG'; dat1='...'; title1='...'; inf1=R; dat2=...; title2=...; inf2=R" bench/sizing.gp
# Each data file has the columns: pool_pct server_vllm server_sglang lru belady
# ("-" where a column was not measured).

set terminal pngcairo size 1200,520 font "DejaVu Sans,10" noenhanced
set output out
set datafile missing "-"
set multiplot layout 1,2
set logscale x
set xrange [0.8:125]
set xtics ("1" 1, "2" 2, "5" 5, "10" 10, "20" 20, "40" 40, "100" 100)
set yrange [0:*]
set format y "%.2f"
set xlabel "pool size, % of the trace's unique blocks (num_pages per rank)"
set ylabel "prefix-hit ratio (hit blocks / all blocks)"
set key right bottom
set grid xtics ytics lc rgb "#dddddd"

do for [i=1:2] {
    f = i == 1 ? dat1 : dat2
    t = i == 1 ? title1 : title2
    inf = i == 1 ? inf1 : inf2
    set title t
    plot inf with lines dt 3 lc rgb "#777777" title sprintf("infinite cache (%.3f)", inf), \
         f using 1:5 with linespoints lw 2 pt 9 lc rgb "#2a9d8f" title "Belady (optimum)", \
         f using 1:4 with linespoints lw 2 pt 7 lc rgb "#264653" title "exact LRU", \
         f using 1:2 with points pt 6 ps 2 lw 2 lc rgb "#e76f51" title "hf3fs-metad, vLLM calls", \
         f using 1:3 with points pt 2 ps 1.6 lw 2 lc rgb "#e9c46a" title "hf3fs-metad, SGLang calls"
}
unset multiplot
