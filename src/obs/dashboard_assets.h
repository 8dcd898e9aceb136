// The dashboard page (/dashboard): one self-contained HTML document with its CSS and JS inlined,
// embedded in the binary. Source: web/dashboard/index.html; dashboard_assets.cc is generated
// from it at configure time (CMakeLists.txt; a test checks they are equal).
//
// The page polls /dashboard/data (ServerMetrics::dashboard_json(); override with ?data=URL,
// period with ?interval=ms) and draws its charts on canvas. Serve it as
// "text/html; charset=utf-8". Thread-safe (static data).
#pragma once

#include <string_view>

namespace ts::obs {

std::string_view dashboard_html();

}  // namespace ts::obs
