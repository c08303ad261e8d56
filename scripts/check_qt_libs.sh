#!/usr/bin/env bash
# Does this Linux machine have the system libraries Qt's xcb platform plugin needs? If not, say
# the one command that installs them for this distribution and exit 1 — instead of Qt's
# "could not load the Qt platform plugin xcb" with no hint.
#
#   scripts/check_qt_libs.sh [PYTHON]      # PYTHON: the interpreter that has PySide6
#
# The plugin itself is asked (ldd on libqxcb.so), so exactly the missing libraries are named;
# without the plugin, a fixed list is looked up with ldconfig. OS_RELEASE may point at another
# os-release file (tests).
set -uo pipefail

python="${1:-python3}"
os_release="${OS_RELEASE:-/etc/os-release}"

case "$(uname -s)" in
    Linux) ;;
    *) exit 0 ;;  # macOS and Windows bring their own platform plugins
esac
if [[ -n "${QT_QPA_PLATFORM:-}" && "${QT_QPA_PLATFORM}" != xcb* ]]; then
    exit 0  # offscreen, wayland…: the xcb plugin is not used
fi

# soname → package, per package manager
declare -A APT=(
    [libxcb-cursor.so.0]=libxcb-cursor0 [libxcb-icccm.so.4]=libxcb-icccm4
    [libxcb-keysyms.so.1]=libxcb-keysyms1 [libxcb-image.so.0]=libxcb-image0
    [libxcb-render-util.so.0]=libxcb-render-util0 [libxcb-shape.so.0]=libxcb-shape0
    [libxcb-xkb.so.1]=libxcb-xkb1 [libxcb-randr.so.0]=libxcb-randr0
    [libxcb-xfixes.so.0]=libxcb-xfixes0 [libxcb-sync.so.1]=libxcb-sync1
    [libxcb-shm.so.0]=libxcb-shm0 [libxcb-render.so.0]=libxcb-render0
    [libxcb-xinput.so.0]=libxcb-xinput0 [libxcb.so.1]=libxcb1 [libxcb-util.so.1]=libxcb-util1
    [libxkbcommon-x11.so.0]=libxkbcommon-x11-0 [libxkbcommon.so.0]=libxkbcommon0
    [libX11-xcb.so.1]=libx11-xcb1 [libX11.so.6]=libx11-6 [libSM.so.6]=libsm6
    [libICE.so.6]=libice6 [libfontconfig.so.1]=libfontconfig1 [libfreetype.so.6]=libfreetype6
    [libdbus-1.so.3]=libdbus-1-3 [libEGL.so.1]=libegl1 [libGL.so.1]=libgl1
    [libOpenGL.so.0]=libopengl0 [libGLX.so.0]=libglx0
)
declare -A DNF=(
    [libxcb-cursor.so.0]=xcb-util-cursor [libxcb-icccm.so.4]=xcb-util-wm
    [libxcb-keysyms.so.1]=xcb-util-keysyms [libxcb-image.so.0]=xcb-util-image
    [libxcb-render-util.so.0]=xcb-util-renderutil [libxkbcommon-x11.so.0]=libxkbcommon-x11
    [libxcb-util.so.1]=xcb-util
    [libxkbcommon.so.0]=libxkbcommon [libX11-xcb.so.1]=libX11-xcb [libX11.so.6]=libX11
    [libSM.so.6]=libSM [libICE.so.6]=libICE [libfontconfig.so.1]=fontconfig
    [libfreetype.so.6]=freetype [libdbus-1.so.3]=dbus-libs [libEGL.so.1]=libglvnd-egl
    [libGL.so.1]=libglvnd-glx [libOpenGL.so.0]=libglvnd-opengl [libGLX.so.0]=libglvnd-glx
)
declare -A PACMAN=(
    [libxcb-cursor.so.0]=xcb-util-cursor [libxcb-icccm.so.4]=xcb-util-wm
    [libxcb-keysyms.so.1]=xcb-util-keysyms [libxcb-image.so.0]=xcb-util-image
    [libxcb-render-util.so.0]=xcb-util-renderutil [libxkbcommon-x11.so.0]=libxkbcommon-x11
    [libxcb-util.so.1]=xcb-util
    [libxkbcommon.so.0]=libxkbcommon [libX11-xcb.so.1]=libx11 [libX11.so.6]=libx11
    [libSM.so.6]=libsm [libICE.so.6]=libice [libfontconfig.so.1]=fontconfig
    [libfreetype.so.6]=freetype2 [libdbus-1.so.3]=dbus [libEGL.so.1]=libglvnd
    [libGL.so.1]=libglvnd [libOpenGL.so.0]=libglvnd [libGLX.so.0]=libglvnd
)
declare -A ZYPPER=(
    [libxcb-cursor.so.0]=libxcb-cursor0 [libxcb-icccm.so.4]=libxcb-icccm4
    [libxcb-keysyms.so.1]=libxcb-keysyms1 [libxcb-image.so.0]=libxcb-image0
    [libxcb-render-util.so.0]=libxcb-render-util0 [libxkbcommon-x11.so.0]=libxkbcommon-x11-0
    [libxcb-util.so.1]=libxcb-util1
    [libxkbcommon.so.0]=libxkbcommon0 [libX11-xcb.so.1]=libX11-xcb1 [libX11.so.6]=libX11-6
    [libSM.so.6]=libSM6 [libICE.so.6]=libICE6 [libfontconfig.so.1]=libfontconfig1
    [libfreetype.so.6]=libfreetype6 [libdbus-1.so.3]=libdbus-1-3 [libEGL.so.1]=libEGL1
    [libGL.so.1]=libGL1 [libOpenGL.so.0]=libOpenGL0 [libGLX.so.0]=libGLX0
)
# libxcb's own extensions come with libxcb itself on Fedora, Arch and openSUSE (xcb-*.so.N)
for lib in libxcb-shape.so.0 libxcb-xkb.so.1 libxcb-randr.so.0 libxcb-xfixes.so.0 \
    libxcb-sync.so.1 libxcb-shm.so.0 libxcb-render.so.0 libxcb-xinput.so.0 libxcb.so.1; do
    DNF[$lib]=libxcb
    PACMAN[$lib]=libxcb
    ZYPPER[$lib]=libxcb1
done
ZYPPER[libxcb-shape.so.0]=libxcb-shape0
ZYPPER[libxcb-xkb.so.1]=libxcb-xkb1
ZYPPER[libxcb-randr.so.0]=libxcb-randr0
ZYPPER[libxcb-xinput.so.0]=libxcb-xinput0

missing=()
mapfile -t plugins < <("$python" - 2>/dev/null <<'PY'
import pathlib
try:
    import PySide6
except ImportError:
    raise SystemExit(0)
qt = pathlib.Path(PySide6.__file__).parent / "Qt"
for path in (qt / "plugins" / "platforms" / "libqxcb.so", qt / "lib" / "libQt6XcbQpa.so.6"):
    if path.is_file():
        print(path)
PY
)
if [[ ${#plugins[@]} -gt 0 ]] && command -v ldd >/dev/null 2>&1; then
    while read -r name; do
        [[ -n "$name" ]] && missing+=("$name")
    done < <(for f in "${plugins[@]}"; do ldd "$f" 2>/dev/null; done | awk '/=> not found/ {print $1}' | sort -u)
else
    known=$(ldconfig -p 2>/dev/null)
    for name in libxcb-cursor.so.0 libxcb-icccm.so.4 libxcb-keysyms.so.1 libxcb-image.so.0 \
        libxcb-render-util.so.0 libxkbcommon-x11.so.0 libxcb-shape.so.0 libxcb-xkb.so.1 \
        libX11-xcb.so.1; do
        grep -q "^[[:space:]]*$name " <<<"$known" || missing+=("$name")
    done
fi
[[ ${#missing[@]} -eq 0 ]] && exit 0

id="" like=""
if [[ -r "$os_release" ]]; then
    id=$(. "$os_release" && echo "${ID:-}")
    like=$(. "$os_release" && echo "${ID_LIKE:-}")
fi
family=""
for word in $id $like; do
    case "$word" in
        debian|ubuntu|linuxmint|pop|raspbian) family=apt; break ;;
        fedora|rhel|centos|rocky|almalinux) family=dnf; break ;;
        arch|manjaro|endeavouros) family=pacman; break ;;
        opensuse*|suse|sles) family=zypper; break ;;
    esac
done

packages=()
add() { local p; for p in "${packages[@]}"; do [[ "$p" == "$1" ]] && return; done; packages+=("$1"); }
for name in "${missing[@]}"; do
    case "$family" in
        apt) add "${APT[$name]:-$name}" ;;
        dnf) add "${DNF[$name]:-$name}" ;;
        pacman) add "${PACMAN[$name]:-$name}" ;;
        zypper) add "${ZYPPER[$name]:-$name}" ;;
        *) add "$name" ;;
    esac
done

echo "Tessera needs system libraries that Qt's window system plugin (xcb) cannot find:" >&2
echo "  ${missing[*]}" >&2
case "$family" in
    apt) echo "Install them with:  sudo apt-get install ${packages[*]}" >&2 ;;
    dnf) echo "Install them with:  sudo dnf install ${packages[*]}" >&2 ;;
    pacman) echo "Install them with:  sudo pacman -S --needed ${packages[*]}" >&2 ;;
    zypper) echo "Install them with:  sudo zypper install ${packages[*]}" >&2 ;;
    *) echo "Install the packages of your distribution that provide them, then start again." >&2 ;;
esac
exit 1
