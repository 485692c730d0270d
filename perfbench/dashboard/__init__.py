"""The dashboard: a static, self-contained site of ours/ORT ratios (plotly, plotly.js written into
the site: works offline and from file://). data reads the store, figures builds plotly figures,
site writes the pages."""
