#!/usr/bin/env bash
# Pictures (issue 13): `weft plan --plot/--csv` draws the time/memory frontier
# and `weft simulate --plot/--csv` the iteration's timeline. Each SVG must parse
# as XML with an <svg> root and hold the expected marks: a point per frontier
# plan (as many as --json's pareto and the CSV's rows), one chosen circle, one
# budget line, one legend entry per device count with --devices-range; a task
# mark per stream activity, bubbles on pipeline stages, and CSV rows whose last
# end is the simulated iteration time. $1 is the weft binary.
source "$(dirname "$0")/lib.sh" "$1"
cd "$tmp"

"$WEFT" plan --model gpt3-175b --cluster dgx-a100:nodes=8 --batch 64 --pareto --plot f.svg --csv f.csv --json \
  >f.json 2>/dev/null
check "plan --plot exits 0" test $? -eq 0
check "frontier: marks" "$PY" - <<'PYEOF'
import csv, json, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
root = ET.parse("f.svg").getroot()
assert root.tag == ns + "svg", root.tag
cls = lambda c: [e for e in root.iter() if e.get("class") == c]
j = json.load(open("f.json"))
rows = list(csv.DictReader(open("f.csv")))
assert len(cls("pt")) == len(j["pareto"]) == len(rows) > 3, (len(cls("pt")), len(j["pareto"]), len(rows))
assert len(cls("chosen")) == 1 and len(cls("budget")) == 1
chosen = [r for r in rows if r["chosen"] == "1"]
assert len(chosen) == 1 and chosen[0]["plan"] == j["best"]["plan"], chosen
for r, p in zip(rows, j["pareto"]):
    assert r["plan"] == p["plan"] and abs(float(r["iteration_time_s"]) - p["iteration_time_s"]) < 1e-6 * p["iteration_time_s"]
# every point is a plan: its tooltip is the plan string
assert [c.find(ns + "title").text.split(":")[0] for c in cls("pt")] == [p["plan"] for p in j["pareto"]]
PYEOF

"$WEFT" plan --model gpt3-175b --cluster dgx-a100:nodes=64 --batch 1536 --devices-range 256-512 --plot r.svg \
  --csv r.csv >/dev/null 2>&1
check "frontier per device count" "$PY" - <<'PYEOF'
import csv, xml.etree.ElementTree as ET
root = ET.parse("r.svg").getroot()
rows = list(csv.DictReader(open("r.csv")))
series = sorted({(r["series"], r["devices"]) for r in rows})
legend = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text") if t.text and t.text.endswith(" devices")]
assert len(series) > 1 and len(legend) == len(series), (series, legend)
assert sum(1 for e in root.iter() if e.get("class") == "pt") == len(rows)
PYEOF

"$WEFT" simulate --model gpt3-1.3b --cluster dgx-a100:nodes=2 --batch 64 --plan dp=2,tp=2,pp=4,mbs=4,sp=1 \
  --plot t.svg --csv t.csv --json >t.json 2>/dev/null
check "simulate --plot exits 0" test $? -eq 0
check "timeline: marks" "$PY" - <<'PYEOF'
import csv, json, xml.etree.ElementTree as ET
root = ET.parse("t.svg").getroot()
assert root.tag == "{http://www.w3.org/2000/svg}svg"
tasks = [e for e in root.iter() if e.get("class") == "task"]
bubbles = [e for e in root.iter() if e.get("class") == "bubble"]
rows = list(csv.DictReader(open("t.csv")))
j = json.load(open("t.json"))
assert 0 < len(tasks) <= len(rows), (len(tasks), len(rows))
assert len(bubbles) >= 4, len(bubbles)  # every stage of a 1F1B pipeline idles
cats = {r["category"] for r in rows}
assert {"forward", "backward", "tp_comm", "dp_comm"} <= cats, cats
end = max(float(r["start_s"]) + float(r["duration_s"]) for r in rows)
assert abs(end - j["iteration_time_s"]) <= 0.01 * j["iteration_time_s"], (end, j["iteration_time_s"])
assert {r["device"] for r in rows} == {"0", "1", "2", "3"} | ({"4"} & {r["device"] for r in rows})
PYEOF
"$WEFT" plan --model vgg16 --cluster dgx-a100:nodes=2 --batch 64 --pareto --plot ol.svg --csv ol.csv --json >ol.json 2>/dev/null
check "op-level frontier: marks" "$PY" - <<'PYEOF'
import csv, json, xml.etree.ElementTree as ET
root = ET.parse("ol.svg").getroot()
rows = list(csv.DictReader(open("ol.csv")))
j = json.load(open("ol.json"))
pts = [e for e in root.iter() if e.get("class") == "pt"]
assert len(pts) == len(rows) == len(j["pareto"]) > 0, (len(pts), len(rows), len(j["pareto"]))
assert sum(1 for e in root.iter() if e.get("class") == "chosen") == 1
PYEOF
"$WEFT" simulate --model gpt2 --cluster dgx-a100:nodes=1 --batch 8 --plan dp=8 --plot only.svg >/dev/null 2>&1
check "--plot without --trace leaves no temporary trace" test -z "$(ls /tmp/weft-timeline-* 2>/dev/null)"
expect_fail "--plot in a missing directory" "does not exist" plan --model gpt2 --cluster dgx-a100:nodes=1 \
  --batch 8 --plot nodir/f.svg
finish plots.sh
