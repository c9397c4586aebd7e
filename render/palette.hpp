// The colours of the picture: what kind of box an event is and how it is filled.
#pragma once

#include "dtsim/trace.hpp"
#include "pipeline.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace dtsim::render::detail {

struct Rgba {
    double r = 0, g = 0, b = 0, a = 1;
    friend bool operator==(const Rgba&, const Rgba&) = default;
};

// How a box is drawn; one legend entry each. The faults-and-checkpoints classes
// (`dtsim failures` traces) are the ops named train, lost, checkpoint, restart,
// failure and idle.
enum class BoxClass : std::uint8_t {
    forward, backward, loss, update, collective, p2p,
    train, lost, checkpoint, restart, failure, idle,
    other
};
inline constexpr std::size_t kBoxClasses = 13;

BoxClass box_class(const Event& e);

// A box's fill as one integer: its class and its layer (the colour ramp position).
// Used to tally which style dominates a pixel column.
using StyleKey = std::uint32_t;
StyleKey style_key(const Event& e);
StyleKey style_key(BoxClass cls, std::int32_t layer);
BoxClass key_class(StyleKey key);
std::int32_t key_layer(StyleKey key);

// Fill colour of a style. `layers` is the number of layers the ramp spans.
Rgba style_colour(StyleKey key, int layers);
// Forward colour of a layer: a ramp from green (layer 0) to red (last layer).
Rgba layer_colour(std::int32_t layer, int layers);
// Mixes towards white by `amount` (0 = unchanged, 1 = white).
Rgba lighter(Rgba c, double amount);
// The colour a translucent fill shows over white.
Rgba over_white(Rgba c);
// Black or white, whichever reads better on `c` (seen over white).
Rgba text_on(Rgba c);

// The colour of a memory kind (Trace::memory_kinds): the hardware world's five by name, any other
// by its place in the list.
Rgba memory_kind_colour(std::string_view name, std::size_t index);

// A pass of the pipeline view: its kind's colour, lighter for the rank's second model
// chunk (and again for a third...), as the interleaved-1F1B figure shades its chunks.
Rgba pass_colour(PassKind kind, int chunk);

namespace colours {
// The pipeline view's passes: hues of Tableau 10 (the 2016 palette by M. Stone, #4E79A7 blue, #59A14F
// green, #76B7B2 teal, #B07AA1 purple, #F28E2B orange, #BAB0AC grey, #E15759 red), picked to tell apart.
inline constexpr Rgba pass_forward{0.31, 0.47, 0.65};     // F: blue
inline constexpr Rgba pass_backward{0.35, 0.63, 0.31};    // B: green
inline constexpr Rgba pass_input{0.46, 0.72, 0.70};       // I: teal
inline constexpr Rgba pass_weight{0.69, 0.48, 0.63};      // W: purple
inline constexpr Rgba pass_recompute{0.95, 0.56, 0.17};   // recompute: orange
inline constexpr Rgba pass_other{0.73, 0.69, 0.67};       // other work on the compute stream: warm grey
inline constexpr Rgba pass_overlap{0.88, 0.34, 0.35};     // the outline of an overlapped F&B pair: red
inline constexpr Rgba bubble{0.93, 0.89, 0.89};           // idle time of the compute stream
inline constexpr Rgba bubble_hatch{0.80, 0.62, 0.62};
inline constexpr Rgba update{1.0, 0.82, 0.16};
inline constexpr Rgba loss{0.47, 0.31, 0.67};
inline constexpr Rgba p2p{0.55, 0.55, 0.55};
inline constexpr Rgba other{0.76, 0.71, 0.59};
inline constexpr Rgba train{0.14, 0.59, 0.24};       // useful steps (kept by a checkpoint)
inline constexpr Rgba lost{0.96, 0.6, 0.6};          // steps done, then lost to a failure
inline constexpr Rgba checkpoint{0.12, 0.39, 0.75};  // writing a checkpoint
inline constexpr Rgba restart{1.0, 0.6, 0.1};        // relaunch and checkpoint load
inline constexpr Rgba failure{0.8, 0.0, 0.0};        // the failed node, until replaced
inline constexpr Rgba idle{0.9, 0.9, 0.9};           // waiting for others
inline constexpr Rgba no_layer{0.27, 0.43, 0.67};
inline constexpr Rgba marker{0.35, 0.2, 0.51};        // zero-duration events
inline constexpr Rgba memory{0.67, 0.67, 0.67};       // memory bars
inline constexpr Rgba memory_lane{0.95, 0.95, 0.95};  // memory lane background
inline constexpr Rgba peak{0.86, 0.08, 0.08};         // the maximum memory
inline constexpr Rgba capacity{0.9, 0.47, 0.0};       // the memory capacity line
inline constexpr Rgba outline{0.0, 0.0, 0.0, 0.45};   // box borders
inline constexpr Rgba grid{0.88, 0.88, 0.88};
inline constexpr Rgba text{0.1, 0.1, 0.1};
inline constexpr Rgba faint_text{0.4, 0.4, 0.4};
inline constexpr double collective_alpha = 0.5;
inline constexpr double backward_lightening = 0.5;
}  // namespace colours

}  // namespace dtsim::render::detail
