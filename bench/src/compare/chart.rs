//! SVG charts of the comparison's tables, drawn with `plotters`' SVG
//! backend and written next to the markdown page (`benchmarks.md` gets
//! `benchmarks-throughput.svg` and so on in the same directory).
//!
//! Two shapes: grouped horizontal bars (one group per table row, one bar per
//! server) and lines over time. Text is laid out with DejaVu Sans from the
//! `dejavu` crate, so no system font is needed; the SVG names the family
//! `sans-serif` and the viewer renders it.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Chart width in pixels.
const WIDTH: u32 = 960;
/// Pixels of one bar (its height) in a bar chart.
const BAR: u32 = 11;
/// Pixels between two groups of bars.
const GAP: u32 = 9;
/// Pixels left of the plot for the group labels.
const LABELS: u32 = 300;
/// Redis, Leasehold, a third server: the bar colours in series order.
const COLOURS: [RGBColor; 3] = [
    RGBColor(0xc0, 0x39, 0x2b),
    RGBColor(0x1f, 0x6f, 0xb4),
    RGBColor(0x7f, 0xb0, 0xdc),
];

/// A grouped horizontal bar chart: one group per row of a table, one bar
/// per server (series) in each.
#[derive(Debug, Clone, PartialEq)]
pub struct Bars {
    /// Title above the plot.
    pub title: String,
    /// What the x axis measures, with its unit (`requests/s`, `p99 ms`).
    pub unit: String,
    /// The series' names, in the order of each group's values.
    pub series: Vec<String>,
    /// The groups, top to bottom.
    pub groups: Vec<Group>,
}

/// One group of bars: a label and one value per series (None: no bar,
/// for a run that failed or did not happen).
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// Shown left of the bars.
    pub label: String,
    /// One per series.
    pub values: Vec<Option<f64>>,
}

/// Lines over a shared x axis (time).
#[derive(Debug, Clone, PartialEq)]
pub struct Lines {
    /// Title above the plot.
    pub title: String,
    /// The x axis, with its unit.
    pub x_label: String,
    /// The y axis, with its unit.
    pub y_label: String,
    /// Each line's name and its (x, y) points in x order.
    pub series: Vec<(String, Vec<(f64, f64)>)>,
}

/// Makes DejaVu Sans the `sans-serif` face plotters measures text with.
fn font() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
            .map_err(|_| "DejaVu Sans could not be loaded".to_string())
    })
    .clone()
}

fn err(e: impl std::fmt::Display) -> String {
    format!("drawing failed: {e}")
}

/// The largest value of `values`, or 1 when there is none above 0.
fn axis_max(values: impl Iterator<Item = f64>) -> f64 {
    let max = values.fold(0.0f64, f64::max);
    if max > 0.0 {
        max * 1.12
    } else {
        1.0
    }
}

/// A value as the bars' end label shows it: thousands with a `k` or `M`
/// above 10 000, else up to three decimals.
pub fn short(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

/// Draws `b` as an SVG document.
pub fn bars(b: &Bars) -> Result<String, String> {
    font()?;
    let n = b.series.len().max(1) as u32;
    let group_px = n * BAR + GAP;
    let height = 90 + b.groups.len() as u32 * group_px;
    let max = axis_max(
        b.groups
            .iter()
            .flat_map(|g| g.values.iter().flatten().copied()),
    );
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let rows = b.groups.len().max(1) as f64;
        let mut chart = ChartBuilder::on(&root)
            .caption(&b.title, ("sans-serif", 16))
            .margin(10)
            .margin_left(LABELS)
            .x_label_area_size(36)
            .build_cartesian_2d(0.0..max, 0.0..rows)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .disable_y_axis()
            .x_desc(b.unit.as_str())
            .x_label_formatter(&|v| short(*v))
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(err)?;
        let slot = 1.0 / f64::from(group_px);
        for (i, g) in b.groups.iter().enumerate() {
            // Row 0 at the top: plotters' y grows upwards.
            let top = rows - i as f64 - f64::from(GAP) * slot / 2.0;
            for (j, v) in g.values.iter().enumerate() {
                let Some(v) = *v else { continue };
                let y1 = top - j as f64 * f64::from(BAR) * slot;
                let y0 = y1 - f64::from(BAR) * slot * 0.9;
                let colour = COLOURS[j % COLOURS.len()];
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(0.0, y0), (v, y1)],
                        colour.filled(),
                    )))
                    .map_err(err)?;
                chart
                    .draw_series(std::iter::once(Text::new(
                        short(v),
                        (v, (y0 + y1) / 2.0),
                        ("sans-serif", 10)
                            .into_font()
                            .color(&BLACK)
                            .pos(Pos::new(HPos::Left, VPos::Center)),
                    )))
                    .map_err(err)?;
            }
            let (x, y) = chart.backend_coord(&(0.0, rows - i as f64 - 0.5));
            root.draw(&Text::new(
                g.label.clone(),
                (x - 8, y),
                ("sans-serif", 12)
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Right, VPos::Center)),
            ))
            .map_err(err)?;
        }
        for (j, name) in b.series.iter().enumerate() {
            let colour = COLOURS[j % COLOURS.len()];
            let x = 12 + j as i32 * 150;
            root.draw(&Rectangle::new([(x, 12), (x + 12, 24)], colour.filled()))
                .map_err(err)?;
            root.draw(&Text::new(
                name.clone(),
                (x + 18, 18),
                ("sans-serif", 12)
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Draws `l` as an SVG document.
pub fn lines(l: &Lines) -> Result<String, String> {
    font()?;
    let points = || l.series.iter().flat_map(|(_, p)| p.iter());
    let x_max = axis_max(points().map(|p| p.0)) / 1.12;
    let y_max = axis_max(points().map(|p| p.1));
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, 420)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(&l.title, ("sans-serif", 16))
            .margin(14)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..x_max, 0.0..y_max)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc(l.x_label.as_str())
            .y_desc(l.y_label.as_str())
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(err)?;
        for (j, (name, pts)) in l.series.iter().enumerate() {
            let colour = COLOURS[j % COLOURS.len()];
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), colour.stroke_width(2)))
                .map_err(err)?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// The file a chart named `what` of the page `out` goes to: beside it,
/// `<stem>-<what>.svg`.
pub fn path(out: &Path, what: &str) -> PathBuf {
    let stem = out
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "benchmarks".into());
    out.with_file_name(format!("{stem}-{what}.svg"))
}

/// The chart's file name as the page links it (the page and its charts
/// share a directory).
pub fn link(out: &Path, what: &str) -> String {
    path(out, what)
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_rows() -> Bars {
        Bars {
            title: "Throughput".into(),
            unit: "requests/s".into(),
            series: vec!["Redis".into(), "Leasehold".into()],
            groups: vec![
                Group {
                    label: "SET -P 1".into(),
                    values: vec![Some(100_000.0), Some(150_000.0)],
                },
                Group {
                    label: "TOKENLEASE -P 16".into(),
                    values: vec![Some(2_000.0), None],
                },
            ],
        }
    }

    #[test]
    fn a_bar_chart_is_svg_with_a_bar_for_each_value_and_every_label() {
        let svg = bars(&two_rows()).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
        assert!(svg.trim_end().ends_with("</svg>"));
        for text in [
            "Throughput",
            "SET -P 1",
            "TOKENLEASE -P 16",
            "Redis",
            "Leasehold",
            "150k",
            "100k",
            "2000",
        ] {
            assert!(svg.contains(text), "{text} missing");
        }
        // One filled rectangle per present value, two for the legend, and
        // the background ones plotters draws; the Leasehold colour appears
        // as the one bar and its legend box.
        let leasehold = svg.matches("#1F6FB4").count();
        assert_eq!(leasehold, 2, "{svg}");
    }

    #[test]
    fn a_longer_bar_for_a_larger_value() {
        let svg = bars(&two_rows()).unwrap();
        let widths: Vec<f64> = svg
            .lines()
            .filter(|l| l.contains("<rect") && (l.contains("#C0392B") || l.contains("#1F6FB4")))
            .filter_map(|l| {
                let w = l.split("width=\"").nth(1)?.split('"').next()?;
                w.parse().ok()
            })
            .collect();
        // Redis SET, Leasehold SET, Redis TOKENLEASE, then the legend boxes.
        assert!(widths.len() >= 3, "{widths:?}");
        assert!(
            widths[1] > widths[0] * 1.4 && widths[1] < widths[0] * 1.6,
            "{widths:?}"
        );
        assert!(widths[2] < widths[0] / 20.0, "{widths:?}");
    }

    #[test]
    fn a_line_chart_names_its_series_and_axes() {
        let svg = lines(&Lines {
            title: "admitted against allowed".into(),
            x_label: "time (s)".into(),
            y_label: "requests".into(),
            series: vec![
                ("allowed".into(), vec![(0.0, 200.0), (1.0, 400.0)]),
                ("admitted".into(), vec![(0.0, 190.0), (1.0, 395.0)]),
            ],
        })
        .unwrap();
        for text in [
            "admitted against allowed",
            "time (s)",
            "requests",
            "allowed",
            "admitted",
        ] {
            assert!(svg.contains(text), "{text} missing");
        }
        assert!(svg.contains("<polyline"), "no line drawn");
    }

    #[test]
    fn charts_sit_beside_the_page() {
        let out = Path::new("docs/benchmarks.md");
        assert_eq!(
            path(out, "throughput"),
            Path::new("docs/benchmarks-throughput.svg")
        );
        assert_eq!(link(out, "latency"), "benchmarks-latency.svg");
    }

    #[test]
    fn short_labels() {
        assert_eq!(short(1_234_567.0), "1.23M");
        assert_eq!(short(45_678.0), "46k");
        assert_eq!(short(512.4), "512");
        assert_eq!(short(0.25), "0.250");
        assert_eq!(short(0.0), "0");
    }
}
