# Throughput against size from `kfuse bench --json`: element-wise chains (GB/s against chain
# length) and matmul + bias + GELU (TFLOP/s against size). bench/plot.sh makes the data files
# from the JSON and calls this script:
#
#   gnuplot -e "chains='chains.dat'; matmul='matmul.dat'; out='perf.png'; title='...'" plot.gp
#
# chains.dat: ops  kfuse_fused  kfuse_unfused  copy_reference  torch_eager  torch_compile (GB/s)
# matmul.dat: label  f32_fused  f32_unfused  f16_fused  f16_unfused  f32_eager  f32_compile
#             f16_eager  f16_compile  f32_reference  f16_reference  (TFLOP/s)
# A value of NaN (no measurement: skipped, no torch) leaves a gap.

if (!exists("out")) out = "perf.png"
if (!exists("title")) title = "kfuse: fused against unfused"
set terminal pngcairo size 1400,640 font "sans,10"
set output out
set datafile missing "NaN"
set key below horizontal maxcols 3 box
set grid ytics
set multiplot layout 1,2 title title

set title "element-wise chains of 1 to 8 operators (compulsory bytes / time)"
unset xlabel
set ylabel "GB/s"
set xrange [0.5:8.5]
set xtics 1
set yrange [0:*]
plot chains using 1:4 with lines dashtype 2 lw 2 lc rgb "#888888" title "copy (reference)", \
     chains using 1:2 with linespoints pt 7 lw 2 lc rgb "#1f77b4" title "kfuse fused", \
     chains using 1:3 with linespoints pt 5 lw 2 lc rgb "#ff7f0e" title "kfuse unfused", \
     chains using 1:5 with linespoints pt 9 lw 1 dashtype 3 lc rgb "#2ca02c" title "torch eager", \
     chains using 1:6 with linespoints pt 11 lw 1 dashtype 3 lc rgb "#d62728" title "torch.compile"

set title "matmul + bias + GELU, m x n x k (2mnk / time)"
set ylabel "TFLOP/s"
set autoscale x
set offsets 0.4, 0.4, 0, 0
set xtics norotate
set rmargin 6
set yrange [0:*]
plot matmul using 0:10 with lines dashtype 2 lw 2 lc rgb "#888888" title "kfuse matmul f32 (reference)", \
     matmul using 0:11 with lines dashtype 4 lw 2 lc rgb "#888888" title "kfuse matmul f16 (reference)", \
     matmul using 0:2:xtic(1) with linespoints pt 7 lw 2 lc rgb "#1f77b4" title "kfuse f32 fused", \
     matmul using 0:3 with linespoints pt 5 lw 2 lc rgb "#ff7f0e" title "kfuse f32 unfused", \
     matmul using 0:4 with linespoints pt 7 lw 2 dashtype 2 lc rgb "#1f77b4" title "kfuse f16 fused", \
     matmul using 0:5 with linespoints pt 5 lw 2 dashtype 2 lc rgb "#ff7f0e" title "kfuse f16 unfused", \
     matmul using 0:6 with linespoints pt 9 lw 1 dashtype 3 lc rgb "#2ca02c" title "torch f32 eager", \
     matmul using 0:7 with linespoints pt 11 lw 1 dashtype 3 lc rgb "#d62728" title "torch f32 compile", \
     matmul using 0:8 with linespoints pt 8 lw 1 dashtype 3 lc rgb "#2ca02c" title "torch f16 eager", \
     matmul using 0:9 with linespoints pt 10 lw 1 dashtype 3 lc rgb "#d62728" title "torch f16 compile"

unset multiplot
